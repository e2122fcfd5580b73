// io::MetricsWriter: every value at full precision in both files; a metric name with a space is
// refused before anything is written; on resume the records after the saved step are dropped
// and a file that is not mlo's (or is missing) is moved aside (or recreated) with a warning.
#include <mlo/base/error.h>
#include <mlo/io/metrics.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace metrics_writer_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mlo_metrics_writer_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The files in `dir` whose names begin with `prefix`.
std::vector<fs::path> named(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path());
  }
  return out;
}

const std::string kHeader = "step,source,metric,value\n";

}  // namespace

TEST_CASE("MetricsWriter: both files keep every value at full precision", "[io]") {
  const fs::path dir = scratch("precision");
  const double value = 0.1234567890123456789;  // 17 significant digits in a double
  {
    mlo::io::MetricsWriter writer(dir.string());
    writer.write(3, "classifier", {{"loss", value}, {"lr", 0.05}});
  }
  const std::string csv = read(dir / "metrics.csv");
  INFO(csv);
  std::istringstream lines(csv);
  std::string header, loss_row, lr_row;
  std::getline(lines, header);
  std::getline(lines, loss_row);
  std::getline(lines, lr_row);
  CHECK(header == "step,source,metric,value");
  CHECK(lr_row == "3,classifier,lr,0.05");  // the shortest exact text, not 0.05000000000000000277
  const std::string text = loss_row.substr(loss_row.rfind(',') + 1);
  CHECK(std::stod(text) == value);  // exact, bit for bit
  const auto json = nlohmann::json::parse(read(dir / "metrics.jsonl"));
  CHECK(json.at("loss").get<double>() == value);
}

TEST_CASE("MetricsWriter: a metric name with a space is refused, naming it", "[io]") {
  const fs::path dir = scratch("names");
  mlo::io::MetricsWriter writer(dir.string());
  REQUIRE_THROWS_WITH(writer.write(1, "validation", {{"valid/acc", 0.5}, {"valid/acc/ankle boot", 0.7}}),
                      Contains("metrics of 'validation' at step 1: the name 'valid/acc/ankle boot'") &&
                          Contains("mlo::metric_segment"));
  CHECK(read(dir / "metrics.csv") == "step,source,metric,value\n");  // nothing written
}

TEST_CASE("MetricsWriter: resuming keeps the records up to the saved step, atomically", "[io]") {
  const fs::path dir = scratch("resume");
  // Records at steps 4, 8 and 12 (a source whose name holds a comma too), then a line cut off by
  // a crash at step 16; the state was saved at step 8.
  write(dir / "metrics.csv", kHeader +
                                 "4,classifier,loss,0.5\n4,a,b,lr,0.1\n8,classifier,loss,NaN\n"
                                 "12,classifier,loss,0.25\n16,classif");
  write(dir / "metrics.jsonl",
        "{\"step\":4,\"source\":\"classifier\",\"loss\":0.5}\n"
        "{\"step\":8,\"source\":\"classifier\",\"loss\":\"NaN\"}\n"
        "{\"step\":12,\"source\":\"classifier\",\"loss\":0.25}\n{\"step\":16,\"sou");
  {
    mlo::io::MetricsWriter writer(dir.string(), /*resume_step=*/8);
    CHECK(writer.warnings().empty());
    writer.write(9, "classifier", {{"loss", 0.75}});
  }
  CHECK(read(dir / "metrics.csv") == kHeader +
                                         "4,classifier,loss,0.5\n4,a,b,lr,0.1\n"
                                         "8,classifier,loss,NaN\n9,classifier,loss,0.75\n");
  CHECK(read(dir / "metrics.jsonl") ==
        "{\"step\":4,\"source\":\"classifier\",\"loss\":0.5}\n"
        "{\"step\":8,\"source\":\"classifier\",\"loss\":\"NaN\"}\n"
        "{\"step\":9,\"source\":\"classifier\",\"loss\":0.75}\n");
  // (rewritten through a temporary file renamed over it: none is left behind)
  CHECK(named(dir, "metrics.csv.").empty());
  CHECK(named(dir, "metrics.jsonl.").empty());
}

TEST_CASE("MetricsWriter: a metrics file that is not mlo's is moved aside on resume, unchanged",
          "[io]") {
  const fs::path dir = scratch("damaged");
  const std::string garbage = std::string("garbage,\x01\xff not a header\n12,3\n\0tail", 29);
  write(dir / "metrics.csv", garbage);
  const std::string jsonl = "{\"step\":4,\"source\":\"classifier\",\"loss\":0.5}\n";
  write(dir / "metrics.jsonl", jsonl);
  std::vector<std::string> warnings;
  {
    mlo::io::MetricsWriter writer(dir.string(), /*resume_step=*/8);
    warnings = writer.warnings();
    writer.write(9, "classifier", {{"loss", 0.75}});
  }
  const auto aside = named(dir, "metrics.csv.damaged-");
  REQUIRE(aside.size() == 1);
  CHECK(read(aside[0]) == garbage);  // byte for byte
  CHECK(read(dir / "metrics.csv") == kHeader + "9,classifier,loss,0.75\n");
  CHECK(read(dir / "metrics.jsonl") ==
        jsonl + "{\"step\":9,\"source\":\"classifier\",\"loss\":0.75}\n");
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0],
             Contains("'" + (dir / "metrics.csv").string() + "' is not one mlo wrote") &&
                 Contains("line 1 ('garbage,??") &&
                 Contains("is not the header 'step,source,metric,value'") &&
                 Contains("kept as it was in '" + aside[0].string() + "'") &&
                 Contains("records of the steps up to 8"));

  // A line that is not a record, at or before the saved step (here a cut-off one), or in the
  // JSON lines: the same, and the other file is kept.
  const std::string csv = kHeader + "4,classifier,loss,0.5\n6,classifier,loss\n";
  write(dir / "metrics.csv", csv);
  const std::string lines = jsonl +
                            "{\"step\":6,\"source\":\"classifier\",\"loss\":0.5}\n"
                            "not json\n{\"step\":7,\"sou";
  write(dir / "metrics.jsonl", lines);
  fs::remove(aside[0]);
  {
    mlo::io::MetricsWriter writer(dir.string(), /*resume_step=*/8);
    REQUIRE(writer.warnings().size() == 2);
    CHECK_THAT(writer.warnings()[0],
               Contains("line 3 ('6,classifier,loss'): expected step,source,metric,value"));
    CHECK_THAT(writer.warnings()[1], Contains("metrics.jsonl' is not one mlo wrote (line 3 "
                                              "('not json'): not a JSON object)"));
  }
  REQUIRE(named(dir, "metrics.csv.damaged-").size() == 1);
  CHECK(read(named(dir, "metrics.csv.damaged-")[0]) == csv);
  REQUIRE(named(dir, "metrics.jsonl.damaged-").size() == 1);
  CHECK(read(named(dir, "metrics.jsonl.damaged-")[0]) == lines);
  CHECK(read(dir / "metrics.csv") == kHeader);
  CHECK(read(dir / "metrics.jsonl").empty());
}

TEST_CASE(
    "MetricsWriter: a deleted metrics file is recreated on resume with its header and a "
    "warning",
    "[io]") {
  const fs::path dir = scratch("deleted");
  const std::string jsonl = "{\"step\":4,\"source\":\"classifier\",\"loss\":0.5}\n";
  write(dir / "metrics.jsonl", jsonl);
  {
    mlo::io::MetricsWriter writer(dir.string(), /*resume_step=*/8);
    REQUIRE(writer.warnings().size() == 1);
    CHECK_THAT(writer.warnings()[0],
               Contains("the metrics file '" + (dir / "metrics.csv").string() + "' is missing") &&
                   Contains("started with its header") &&
                   Contains("the records of the steps up to 8 (before the resume) are missing"));
    writer.write(9, "classifier", {{"loss", 0.75}});
  }
  CHECK(read(dir / "metrics.csv") == kHeader + "9,classifier,loss,0.75\n");
  CHECK(read(dir / "metrics.jsonl") ==
        jsonl + "{\"step\":9,\"source\":\"classifier\",\"loss\":0.75}\n");
}

}  // namespace metrics_writer_test
