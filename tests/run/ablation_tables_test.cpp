// The memory-ablation tables committed under runs/ (docs/memory-ablation.md quotes them): in
// every row of every table, the measured peak is at least the floor, since the floor is a lower
// bound of the peak; the CSV and the JSON of one run agree. A table whose "floor" is above a
// measured peak is not a floor, and fails here.
#include "support/text_files.h"
#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const char* const kTables[] = {"runs/ablation_b100", "runs/ablation_b32"};

using mlo_test::csv_fields;
using mlo_test::read_text;

struct Bytes {
  int64_t peak = 0;
  int64_t floor = 0;
};

// key -> (peak, floor) from an ablation.csv: comment lines start with '#', then the header, whose
// column names locate the two figures.
std::map<std::string, Bytes> csv_rows(const std::string& text) {
  std::istringstream lines(text);
  std::vector<std::string> header;
  std::map<std::string, Bytes> rows;
  size_t peak = 0, floor = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto fields = csv_fields(line);
    if (header.empty()) {
      header = fields;
      for (size_t i = 0; i < header.size(); ++i) {
        if (header[i] == "peak_bytes") peak = i;
        if (header[i] == "floor_bytes") floor = i;
      }
      REQUIRE(header[peak] == "peak_bytes");
      REQUIRE(header[floor] == "floor_bytes");
      continue;
    }
    REQUIRE(fields.size() == header.size());
    rows[fields[0]] = Bytes{std::stoll(fields[peak]), std::stoll(fields[floor])};
  }
  return rows;
}

}  // namespace

TEST_CASE("ablation tables under runs/: every row's peak is at least its floor", "[run][ablate]") {
  for (const char* table : kTables) {
    const fs::path dir = fs::path(MLO_SOURCE_DIR) / table;
    INFO(dir.string());
    const auto csv = csv_rows(read_text(dir / "ablation.csv"));
    const auto json = nlohmann::json::parse(read_text(dir / "ablation.json"));
    REQUIRE(csv.count("baseline") == 1);
    REQUIRE(json.at("rows").size() == csv.size());
    for (const auto& row : json.at("rows")) {
      const std::string key = row.at("key").get<std::string>();
      const int64_t peak = row.at("peak_bytes").get<int64_t>();
      const int64_t floor = row.at("floor_bytes").get<int64_t>();
      INFO("row " << key << ": peak " << peak << " bytes, floor " << floor << " bytes (peak/floor "
                  << double(peak) / double(floor) << ")");
      REQUIRE(csv.count(key) == 1);
      CHECK(csv.at(key).peak == peak);
      CHECK(csv.at(key).floor == floor);
      CHECK(floor > 0);
      CHECK(peak >= floor);
      CHECK(row.at("peak_over_floor").get<double>() >= 1.0);
    }
  }
}
