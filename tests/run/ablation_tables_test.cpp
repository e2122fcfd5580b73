// The memory-ablation tables committed under runs/ (docs/memory-ablation.md quotes them): in
// every row of every table, the measured peak is at least the floor, since the floor is a lower
// bound of the peak; the CSV and the JSON of one run agree. A table whose "floor" is above a
// measured peak is not a floor, and fails here.
#include "support/text_files.h"

#include <mlo/run/yaml.h>

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ablation_tables_test {

namespace fs = std::filesystem;

namespace {

// Two consecutive runs of each committed configuration at batch 100 (docs/memory-ablation.md),
// of the ReLU configuration's ZeRO-2 and ZeRO-3 rows, and of the whole ReLU table again.
const char* const kTables[] = {"runs/ablation_b100/run1",       "runs/ablation_b100/run2",
                               "runs/ablation_b100_swish/run1", "runs/ablation_b100_swish/run2",
                               "runs/ablation_b100_zero3/run1", "runs/ablation_b100_zero3/run2",
                               // The ReLU configuration again, every row, at a later commit.
                               "runs/ablation_b100_rerun/run1", "runs/ablation_b100_rerun/run2",
                               // Both again, the rows of ranks timed against a bracketed baseline.
                               "runs/ablation_b100_brackets/run1",
                               "runs/ablation_b100_brackets/run2",
                               "runs/ablation_b100_swish_brackets/run1",
                               "runs/ablation_b100_swish_brackets/run2",
                               // The ReLU configuration with five timing rounds.
                               "runs/ablation_b100_rounds5/run1",
                               "runs/ablation_b100_rounds5/run2",
                               // The ReLU configuration with CPU time beside wall time.
                               "runs/ablation_b100_cpu_time/run1",
                               "runs/ablation_b100_cpu_time/run2",
                               // Its two rows nearest the baseline, with twelve rounds.
                               "runs/ablation_b100_rounds12/run1",
                               "runs/ablation_b100_rounds12/run2",
                               // Both configurations, the rounds with freed heap memory reused.
                               "runs/ablation_b100_heap_reuse/run1",
                               "runs/ablation_b100_heap_reuse/run2",
                               "runs/ablation_b100_swish_heap_reuse/run1",
                               "runs/ablation_b100_swish_heap_reuse/run2",
                               // The same two configurations on an H100 (scripts/gpu_check.sh).
                               "runs/ablation_b100_cuda/run1",  "runs/ablation_b100_cuda/run2",
                               "runs/ablation_b100_swish_cuda/run1",
                               "runs/ablation_b100_swish_cuda/run2"};

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

namespace {

// Calls check(a, b) on every row that ran the same plan in run1 and run2 of `config` (the
// checkpointing planner picks by measured block times, so two runs may differ there); returns
// run1's table.
template <typename Check>
nlohmann::json for_rows_of_one_plan(const char* config, Check check) {
  const fs::path dir = fs::path(MLO_SOURCE_DIR) / config;
  INFO(dir.string());
  auto first = nlohmann::json::parse(read_text(dir / "run1" / "ablation.json"));
  const auto second = nlohmann::json::parse(read_text(dir / "run2" / "ablation.json"));
  REQUIRE(first.at("rows").size() == second.at("rows").size());
  for (std::size_t i = 0; i < first.at("rows").size(); ++i) {
    const auto& a = first["rows"][i];
    const auto& b = second["rows"][i];
    REQUIRE(a.at("key") == b.at("key"));
    INFO("row " << a.at("key"));
    if (a.at("plan") == b.at("plan")) check(a, b);
  }
  return first;
}

}  // namespace

TEST_CASE("ablation tables under runs/: two consecutive runs measured the same memory",
          "[run][ablate]") {
  // The meter is exact: a row that ran the same plan in both runs peaked at the same byte. Their
  // time ratios are compared in docs/memory-ablation.md, not here: they are measurements of a
  // shared machine.
  for (const char* config :
       {"runs/ablation_b100", "runs/ablation_b100_swish", "runs/ablation_b100_zero3",
        "runs/ablation_b100_rerun", "runs/ablation_b100_brackets",
        "runs/ablation_b100_swish_brackets", "runs/ablation_b100_rounds5",
        "runs/ablation_b100_cpu_time", "runs/ablation_b100_rounds12",
        "runs/ablation_b100_heap_reuse", "runs/ablation_b100_swish_heap_reuse"}) {
    const auto first = for_rows_of_one_plan(config, [](const auto& a, const auto& b) {
      CHECK(a.at("peak_bytes") == b.at("peak_bytes"));
      CHECK(a.at("floor_bytes") == b.at("floor_bytes"));
    });
    CHECK(first.at("rounds").template get<int64_t>() >= 3);
  }
}

TEST_CASE("ablation tables under runs/: two GPU runs of one plan agree within 0.1%",
          "[run][ablate]") {
  // On CUDA the allocator's peak includes cuDNN's workspace, whose size follows the convolution
  // algorithm cuDNN picks at run time (and the checkpointing planner's "9 segments of 18 blocks"
  // may place them differently): two H100 runs of the ReLU table's checkpointing row, with the
  // same plan, have peaked 0.25 MiB apart, and their floors once 0.9 MiB apart. Every other row
  // with the same plan agreed to the byte; the bound is 0.1% of the peak and of the floor, rows
  // of another plan aside.
  for (const char* config : {"runs/ablation_b100_cuda", "runs/ablation_b100_swish_cuda"}) {
    for_rows_of_one_plan(config, [](const auto& a, const auto& b) {
      for (const char* field : {"peak_bytes", "floor_bytes"}) {
        INFO(field);
        const double x = a.at(field).template get<double>();
        const double y = b.at(field).template get<double>();
        CHECK(std::abs(x - y) <= 1e-3 * x);
      }
    });
  }
}

TEST_CASE("ablation tables under runs/: ZeRO-3 holds half of ResNet-50's parameters, gradients "
          "and momentum per rank", "[run][ablate]") {
  // The exact footprint of the classifier (ResNet-50, SGD with momentum) per rank of 2: ZeRO-2
  // halves the momentum; ZeRO-3 halves all three (each block's flat vector split in two: an
  // even count in every block of ResNet-50, so no padding), and the peak is lower than ZeRO-2's.
  for (const char* run : {"runs/ablation_b100_zero3/run1", "runs/ablation_b100_zero3/run2"}) {
    const auto json =
        nlohmann::json::parse(read_text(fs::path(MLO_SOURCE_DIR) / run / "ablation.json"));
    INFO(run);
    std::map<std::string, nlohmann::json> rows;
    for (const auto& row : json.at("rows")) rows[row.at("key").get<std::string>()] = row;
    REQUIRE(rows.count("baseline") == 1);
    REQUIRE(rows.count("zero") == 1);
    REQUIRE(rows.count("zero3") == 1);
    const auto& whole = rows["baseline"]["footprints"][0];
    const auto& zero2 = rows["zero"]["footprints"][0];
    const auto& zero3 = rows["zero3"]["footprints"][0];
    REQUIRE(whole.at("problem") == "classifier");
    REQUIRE(zero3.at("problem") == "classifier");
    const int64_t params = whole.at("parameters").get<int64_t>();
    CHECK(params == 94083368);  // ResNet-50 with a 10-class head: 23520842 floats
    for (const char* part : {"parameters", "gradients", "optimizer_state"}) {
      INFO(part);
      CHECK(2 * zero3.at(part).get<int64_t>() == whole.at(part).get<int64_t>());
    }
    CHECK(zero2.at("parameters").get<int64_t>() == params);
    CHECK(rows["zero3"]["ranks"] == 2);
    CHECK(rows["zero3"]["peak_bytes"].get<int64_t>() < rows["zero"]["peak_bytes"].get<int64_t>());
  }
}

TEST_CASE("configs/ablation: the Swish config is the ReLU config but for the activation",
          "[run][ablate]") {
  const fs::path dir = fs::path(MLO_SOURCE_DIR) / "configs" / "ablation";
  const auto relu = mlo::run::load_run_config((dir / "lt_cifar10_resnet50.yaml").string());
  const auto swish = mlo::run::load_run_config((dir / "lt_cifar10_resnet50_swish.yaml").string());
  // The resolved configurations, key by key: only the name and the activation differ.
  std::istringstream a(mlo::run::to_yaml(relu)), b(mlo::run::to_yaml(swish));
  std::vector<std::string> differences;
  for (std::string x, y; std::getline(a, x) && std::getline(b, y);) {
    if (x != y) differences.push_back(x + " -> " + y);
  }
  INFO(differences.size() << " differing lines");
  REQUIRE(differences.size() == 2);
  CHECK(differences[0].find("ablation_lt_cifar10_resnet50_swish") != std::string::npos);
  CHECK(differences[1].find("activation: relu -> ") != std::string::npos);
  CHECK(differences[1].find("activation: swish") != std::string::npos);
}

}  // namespace ablation_tables_test
