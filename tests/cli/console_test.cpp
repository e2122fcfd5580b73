// What a user of `mlo run` reads: the main job's log lines in log.txt hold the headline metrics
// at 4 significant digits within 120 characters, everything else goes to the metrics files
// (names without spaces), and a run without a validation split says so instead of printing
// zeros.
#include "support/scratch.h"
#include "runner.h"

#include <mlo/core/metrics.h>
#include <mlo/data/fashion_mnist.h>
#include <mlo/run/yaml.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace console_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const char* kTiny = R"(experiment: reweighting
name: tiny
seed: 3
threads: 1
engine: {train_iters: 4, valid_step: 0, log_step: 2, save_step: 0}
data: {dataset: synthetic, synthetic_size: 30, synthetic_test_size: 5, imbalance: 10,
       meta_size: 20, valid_size: 0, batch_size: 16, meta_batch_size: 10, test_batch_size: 50}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
  reweighter:
    model: {name: mwn, hidden: 10}
    optimizer: {name: adam, lr: 0.01}
)";

fs::path scratch(const std::string& name) { return mlo_test::scratch_path("console_test_" + name); }

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The message of a log.txt line: what follows "[2026-01-31 12:00:00] [info] ".
std::string message(const std::string& line) {
  const auto at = line.find("] [info] ");
  return at == std::string::npos ? "" : line.substr(at + 9);
}

// Splits "a  b c  d e" at the double spaces: {"a", "b c", "d e"}.
std::vector<std::string> fields(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t at; (at = text.find("  ", begin)) != std::string::npos; begin = at + 2) {
    out.push_back(text.substr(begin, at - begin));
  }
  out.push_back(text.substr(begin));
  return out;
}

// Significant digits of a number as printed ("0.0005": 1, "1.235e+04": 4, "0.75": 2).
int significant_digits(std::string text) {
  if (text == "nan" || text == "inf" || text == "-inf") return 0;
  if (!text.empty() && text[0] == '-') text = text.substr(1);
  text = text.substr(0, text.find('e'));
  std::string digits;
  for (const char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  }
  const auto first = digits.find_first_not_of('0');
  return first == std::string::npos ? 1 : static_cast<int>(digits.size() - first);
}

// Checks the "name value" pairs of a log line from field `from` on; returns their names.
std::vector<std::string> check_pairs(const std::string& line, size_t from) {
  std::vector<std::string> names;
  const auto parts = fields(message(line));
  REQUIRE(parts.size() > from);
  for (size_t i = from; i < parts.size(); ++i) {
    const auto space = parts[i].find(' ');
    INFO("pair '" << parts[i] << "'");
    REQUIRE(space != std::string::npos);
    REQUIRE(parts[i].find(' ', space + 1) == std::string::npos);  // one name, one value
    const std::string name = parts[i].substr(0, space), value = parts[i].substr(space + 1);
    CHECK(mlo::is_metric_name(name));
    CHECK(significant_digits(value) <= 4);
    CHECK_NOTHROW(std::stod(value));
    names.push_back(name);
  }
  return names;
}

}  // namespace

TEST_CASE("Console: the main job's log lines hold the headline metrics within 120 characters",
          "[cli][console]") {
  if (!fs::exists(mlo::data::FashionMnistOptions::kDefaultRoot)) {
    WARN("skipped: " << mlo::data::FashionMnistOptions::kDefaultRoot
                     << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  const fs::path out = scratch("main");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(out.string());
  const auto config = mlo::run::load_run_config(
      MLO_SOURCE_DIR "/configs/reweight_lt_fmnist.yaml",
      {"engine.train_iters=4", "engine.log_step=2", "engine.valid_step=2", "engine.save_step=0"});
  const auto result = mlo::cli::run_experiment(config, options);
  REQUIRE(result.steps == 4);

  const std::string log = read(out / "log.txt");
  INFO(log);
  std::set<std::string> kinds;
  for (const auto& line : lines_of(log)) {
    const std::string text = message(line);
    INFO("line: " << line);
    CHECK(line.size() <= 120);  // every line: the description's too
    if (text.rfind("[step ", 0) == 0) {
      kinds.insert(fields(text)[0].substr(fields(text)[0].rfind(' ') + 1));  // the problem
      CHECK(line.size() <= 120);
      const auto names = check_pairs(line, 2);
      CHECK(names.at(0) == "loss");
      CHECK(names.at(1) == "acc");
      CHECK(names.at(2) == "lr");
      CHECK(names.size() == 4);  // and one the problem declares
      CHECK((names[3] == "weight_std" || names[3] == "meta_grad_norm"));
    } else if (text.rfind("[validation] ", 0) == 0) {
      kinds.insert("validation");
      CHECK(line.size() <= 120);
      CHECK(check_pairs(line, 1) == std::vector<std::string>{"valid/acc", "valid/balanced_acc",
                                                             "valid/rare3_acc"});
    } else if (text.rfind("final validation: ", 0) == 0 || text.rfind("test: ", 0) == 0) {
      kinds.insert(text.substr(0, text.find(':')));
      CHECK(line.size() <= 120);
    }
  }
  CHECK(kinds == std::set<std::string>{"classifier", "reweighter", "validation",
                                       "final validation", "test"});

  // Everything else is in the metrics files, under names without spaces.
  std::set<std::string> names;
  for (const auto& line : lines_of(read(out / "metrics.jsonl"))) {
    const auto record = nlohmann::json::parse(line);
    for (const auto& item : record.items()) names.insert(item.key());
  }
  for (const auto& name : names) {
    INFO("metric '" << name << "'");
    CHECK(name.find(' ') == std::string::npos);
  }
  for (const char* name : {"valid/acc/ankle_boot", "valid/acc/t-shirt_top",
                           "valid/weight/ankle_boot", "acc/ankle_boot", "wclass/0",
                           "curve/rare/l=1", "weight_mean", "lr", "loss"}) {
    INFO("metric '" << name << "'");
    CHECK(names.count(name) == 1);
  }
  CHECK(result.final.count("acc/ankle_boot") == 1);
  fs::remove_all(out);
}

TEST_CASE("Console: a run without a validation split says so instead of printing zeros",
          "[cli][console]") {
  const fs::path out = scratch("no_valid");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(out.string());
  const auto result =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml"), options);
  REQUIRE(result.steps == 4);
  CHECK(result.valid.empty());
  CHECK(result.final.count("acc") == 1);

  const std::string log = read(out / "log.txt");
  INFO(log);
  CHECK_THAT(log, Contains("] [info] final validation: none (data.valid_size is 0)\n"));
  CHECK(log.find("valid/") == std::string::npos);
  const auto results = nlohmann::json::parse(read(out / "results.json"));
  CHECK(results.at("valid").empty());
  CHECK(results.at("test").contains("balanced_acc"));
  CHECK(read(out / "metrics.csv").find(",validation,") == std::string::npos);
  fs::remove_all(out);
}

TEST_CASE("Console: long lines are wrapped within the console width, pairs kept whole",
          "[cli][console]") {
  using mlo::console_lines;
  // A line within the width stays as it is, its double spaces too.
  CHECK(console_lines("loss 0.5  acc 0.75") == std::vector<std::string>{"loss 0.5  acc 0.75"});
  // Free text breaks between words; an empty line stays; a long word keeps its own line.
  CHECK(console_lines("a bb cc\ndd", 4) == std::vector<std::string>{"a bb", "  cc", "dd"});
  // A word that fits only without the indent goes without it; a longer one stays whole.
  CHECK(console_lines("a bb ccc\ndd", 4) == std::vector<std::string>{"a bb", "ccc", "dd"});
  CHECK(console_lines("x abcdefgh y\n\nz", 5) ==
        std::vector<std::string>{"x", "abcdefgh", "  y", "", "z"});
  // Trailing spaces of a long line make no line of their own.
  CHECK(console_lines("aaaa bbbb   ", 8) == std::vector<std::string>{"aaaa", "  bbbb"});
  // A metric line breaks between "name value" pairs, never inside one.
  CHECK(console_lines("[validation] step 100  valid/a 0.5  valid/bb 0.25", 30) ==
        std::vector<std::string>{"[validation] step 100", "  valid/a 0.5  valid/bb 0.25"});
  // The main job's description, one long line: every piece fits, and nothing is lost.
  std::string line = "training images per class:";
  for (int c = 0; c < 10; ++c) {
    line += " class_name_" + std::to_string(c) + "=" + std::to_string(5000 / (c + 1));
  }
  std::string joined;
  for (const auto& piece : console_lines(line)) {
    CHECK(piece.size() <= mlo::kConsoleWidth);
    joined += (joined.empty() ? "" : " ") + piece.substr(piece.rfind("  ", 0) == 0 ? 2 : 0);
  }
  CHECK(joined == line);
}

}  // namespace console_test
