// io::MetricsWriter: every value at full precision in both files; a metric name with a space is
// refused before anything is written.
#include <mlo/base/error.h>
#include <mlo/io/metrics.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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

}  // namespace metrics_writer_test
