// Multi-seed statistics of the mlo tool: seed lists, summaries and paired differences checked
// against numbers computed by hand, and the summary / compare files on a fake run folder.
#include "support/names.h"
#include "support/scratch.h"
#include "seed_stats.h"
#include "seeds.h"

#include <mlo/base/error.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <iterator>

namespace seed_stats_test {

namespace cli = mlo::cli;
namespace fs = std::filesystem;

TEST_CASE("parse_seeds: ranges and lists", "[cli]") {
  CHECK(cli::parse_seeds("0-4") == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(cli::parse_seeds("1,3,5") == std::vector<int64_t>{1, 3, 5});
  CHECK(cli::parse_seeds("0-2,7") == std::vector<int64_t>{0, 1, 2, 7});
  CHECK(cli::parse_seeds("3") == std::vector<int64_t>{3});
  CHECK_THROWS_AS(cli::parse_seeds("4-0"), mlo::Error);
  CHECK_THROWS_AS(cli::parse_seeds("0-2,1"), mlo::Error);
  CHECK_THROWS_AS(cli::parse_seeds("a"), mlo::Error);
  CHECK_THROWS_AS(cli::parse_seeds(""), mlo::Error);
}

TEST_CASE("summarize: mean, sample std and standard error by hand", "[cli]") {
  // 0.80, 0.82, 0.78: mean 0.80; squares 0 + 4e-4 + 4e-4 = 8e-4; std = sqrt(8e-4 / 2) = 0.02;
  // se = 0.02 / sqrt(3) = 0.011547005.
  const auto s = cli::summarize({0.80, 0.82, 0.78});
  CHECK(s.n == 3);
  CHECK(s.mean == Approx(0.80).epsilon(1e-12));
  CHECK(s.std == Approx(0.02).epsilon(1e-9));
  CHECK(s.se == Approx(0.011547005383792516).epsilon(1e-9));
  const auto one = cli::summarize({0.5});
  CHECK(one.mean == 0.5);
  CHECK(one.std == 0.0);
  CHECK(one.se == 0.0);
}

TEST_CASE("paired: differences over the common seeds by hand", "[cli]") {
  // Seeds 0..4 in A, 0..3 and 9 in B: pairs on 0..3.
  // B - A = 0.02, 0.01, 0.03, -0.02: mean 0.01; deviations 0.01, 0, 0.02, -0.03;
  // squares 1e-4 + 0 + 4e-4 + 9e-4 = 1.4e-3; std = sqrt(1.4e-3 / 3) = 0.021602469;
  // se = std / 2 = 0.010801234.
  const std::map<int64_t, double> a{{0, 0.80}, {1, 0.81}, {2, 0.79}, {3, 0.83}, {4, 0.9}};
  const std::map<int64_t, double> b{{0, 0.82}, {1, 0.82}, {2, 0.82}, {3, 0.81}, {9, 0.1}};
  const auto p = cli::paired(a, b);
  CHECK(p.seeds == std::vector<int64_t>{0, 1, 2, 3});
  REQUIRE(p.diff.size() == 4);
  CHECK(p.diff[3] == Approx(-0.02).epsilon(1e-9));
  CHECK(p.summary.mean == Approx(0.01).epsilon(1e-9));
  CHECK(p.summary.std == Approx(0.021602468994692866).epsilon(1e-9));
  CHECK(p.summary.se == Approx(0.010801234497346433).epsilon(1e-9));
}

namespace {

void fake_run(const fs::path& dir, int64_t seed, double balanced, double rare3) {
  fs::create_directories(dir / ("seed_" + std::to_string(seed)));
  std::ofstream out(dir / ("seed_" + std::to_string(seed)) / "results.json");
  out << "{\"experiment\": \"reweighting\", \"steps\": 10, \"test\": {\"acc\": 0.5, "
         "\"balanced_acc\": "
      << balanced << ", \"rare3_acc\": " << rare3
      << "}, \"valid\": {\"valid/balanced_acc\": " << balanced + 0.01 << "}}\n";
}

}  // namespace

TEST_CASE("write_summary and compare_runs on run folders", "[cli]") {
  const fs::path root = mlo_test::scratch_path("seed_stats_test");
  fake_run(root / "a", 0, 0.70, 0.30);
  fake_run(root / "a", 1, 0.72, 0.34);
  fake_run(root / "b", 0, 0.73, 0.40);
  fake_run(root / "b", 1, 0.74, 0.38);
  const std::string md = cli::write_summary((root / "a").string());
  CHECK(md.find("| test/balanced_acc | 2 | 0.7100 | 0.0141 | 0.0100 |") != std::string::npos);
  CHECK(fs::exists(root / "a" / "summary.json"));
  CHECK(fs::exists(root / "a" / "summary.csv"));
  const auto results = cli::read_seed_results((root / "a").string());
  CHECK(results.at("valid/balanced_acc").at(1) == Approx(0.73));
  // balanced: diffs +0.03, +0.02 -> mean 0.025, std 0.00707107, se 0.005, mean/se 5.
  const std::string text = cli::compare_runs((root / "a").string(), (root / "b").string());
  INFO(text);
  CHECK(text.find("mean difference +0.0250, std 0.0071, standard error 0.0050, n 2, mean/se "
                  "5.00") != std::string::npos);
  CHECK_THROWS_AS(cli::read_seed_results((root / "none").string()), mlo::Error);
  fs::remove_all(root);
}

TEST_CASE("Seed summaries: only the requested seeds, diverged seeds kept, unpaired seeds named",
          "[cli]") {
  const fs::path root = mlo_test::scratch_path("seed_stats_edges_test");
  fake_run(root / "a", 0, 0.70, 0.30);
  fake_run(root / "a", 1, 0.72, 0.34);
  fake_run(root / "a", 7, 0.10, 0.10);  // left over from an earlier, longer run
  // "seed_07" would collide with seed 7: not a seed folder.
  fs::create_directories(root / "a" / "seed_07");
  std::ofstream(root / "a" / "seed_07" / "results.json") << "{\"test\": {\"acc\": 0.9}}\n";
  const std::string md = cli::write_summary((root / "a").string(), {0, 1});
  CHECK(md.find("| test/balanced_acc | 2 | 0.7100 |") != std::string::npos);
  CHECK(cli::read_seed_results((root / "a").string()).at("test/acc").size() == 3);
  // A diverged seed (the runner writes "NaN") is kept: the mean says nan instead of rising.
  fs::create_directories(root / "c" / "seed_0");
  std::ofstream(root / "c" / "seed_0" / "results.json")
      << "{\"test\": {\"balanced_acc\": \"NaN\", \"acc\": 0.5}}\n";
  fake_run(root / "c", 1, 0.74, 0.38);
  const auto diverged = cli::read_seed_results((root / "c").string());
  REQUIRE(diverged.at("test/balanced_acc").size() == 2);
  CHECK(std::isnan(diverged.at("test/balanced_acc").at(0)));
  // Paired only where both have the seed, and the others are named.
  fake_run(root / "d", 1, 0.75, 0.40);
  fake_run(root / "d", 2, 0.76, 0.41);
  const std::string text = cli::compare_runs((root / "a").string(), (root / "d").string(),
                                             {"test/balanced_acc"});
  INFO(text);
  CHECK(text.find("left out, unpaired: 0 (only in A) 7 (only in A) 2 (only in B)") !=
        std::string::npos);
  CHECK(text.find("mean difference +0.0300") != std::string::npos);
  fake_run(root / "e", 5, 0.75, 0.40);
  CHECK_THROWS_WITH(cli::compare_runs((root / "d").string(), (root / "e").string(),
                                      {"test/balanced_acc"}),
                    Catch::Matchers::Contains("have no seed in common"));
  fs::remove_all(root);
}

TEST_CASE("Compare: two single runs pair as one; runs of two experiments are refused", "[cli]") {
  const fs::path root = mlo_test::scratch_path("seed_stats_single");
  const auto single = [&](const std::string& name, const std::string& experiment, int64_t seed,
                          double acc) {
    fs::create_directories(root / name);
    std::ofstream(root / name / "results.json")
        << "{\"experiment\": \"" << experiment << "\", \"meta\": {\"seed\": " << seed
        << "}, \"test\": {\"acc\": " << acc << "}}\n";
  };
  single("a", "hpo", 0, 0.5);
  single("b", "hpo", 3, 0.625);
  const auto files = cli::results_files((root / "b").string());
  REQUIRE(files.size() == 1);
  CHECK(files[0].seed == 3);
  CHECK(files[0].single);
  const std::string text =
      cli::compare_runs((root / "a").string(), (root / "b").string(), {"test/acc"});
  INFO(text);
  CHECK(text.find("(single runs: A of seed 0, B of seed 3; paired as one)") != std::string::npos);
  CHECK(text.find("| 0 | 0.5000 | 0.6250 | +0.1250 |") != std::string::npos);
  CHECK(text.find("mean difference +0.1250, std 0.0000, standard error 0.0000, n 1") !=
        std::string::npos);
  // A reweighting seed folder against an HPO run: test/acc of different models and data.
  fake_run(root / "rw", 0, 0.70, 0.30);
  CHECK_THROWS_WITH(cli::compare_runs((root / "a").string(), (root / "rw").string()),
                    Catch::Matchers::Contains("is of experiment 'hpo' and run B ('" +
                                              (root / "rw").string() + "') of 'reweighting'"));
  fs::remove_all(root);
}

TEST_CASE("Seed summaries and comparisons of an experiment without accuracies: its own metrics",
          "[cli]") {
  const fs::path root = mlo_test::scratch_path("seed_stats_mse");
  // A few-shot learner's results: mse, no accuracy; and a classifier's per-class metric.
  const auto run = [&](const fs::path& dir, int64_t seed, double mse, double scratch) {
    fs::create_directories(dir / ("seed_" + std::to_string(seed)));
    std::ofstream(dir / ("seed_" + std::to_string(seed)) / "results.json")
        << "{\"experiment\": \"fewshot\", \"test\": {\"mse\": " << mse
        << ", \"scratch_mse\": " << scratch << ", \"acc/class1\": 0.5}, \"valid\": "
        << "{\"valid/mse\": " << mse + 1 << "}}\n";
  };
  run(root / "a", 0, 1.0, 4.0);
  run(root / "a", 1, 2.0, 4.0);
  run(root / "b", 0, 0.5, 4.0);
  run(root / "b", 1, 1.0, 4.0);
  const std::string md = cli::write_summary((root / "a").string());
  INFO(md);
  // mse 1, 2: mean 1.5, std sqrt(0.5) = 0.7071, se 0.5.
  CHECK(md.find("| test/mse | 2 | 1.5000 | 0.7071 | 0.5000 |") != std::string::npos);
  CHECK(md.find("| test/scratch_mse | 2 | 4.0000 | 0.0000 | 0.0000 |") != std::string::npos);
  CHECK(md.find("| valid/mse | 2 | 2.5000 |") != std::string::npos);
  CHECK(md.find("acc/class1") == std::string::npos);
  std::ifstream csv(root / "a" / "summary.csv");
  const std::string csv_text((std::istreambuf_iterator<char>(csv)), {});
  CHECK(csv_text.find("test/acc/class1,2,0.500000") != std::string::npos);
  // B - A: mse -0.5, -1.0 -> mean -0.75, std 0.3536, se 0.25; scratch_mse 0, 0.
  const std::string text = cli::compare_runs((root / "a").string(), (root / "b").string());
  INFO(text);
  CHECK(text.find("test/mse (paired by seed, B - A)") != std::string::npos);
  CHECK(text.find("mean difference -0.7500, std 0.3536, standard error 0.2500, n 2") !=
        std::string::npos);
  CHECK(text.find("test/scratch_mse (paired by seed, B - A)") != std::string::npos);
  CHECK(text.find("class1") == std::string::npos);
  CHECK(text.find("balanced_acc") == std::string::npos);
  // Another experiment's folder is refused as such, whatever metrics the two have in common.
  fs::create_directories(root / "h" / "seed_0");
  std::ofstream(root / "h" / "seed_0" / "results.json")
      << "{\"experiment\": \"hpo\", \"test\": {}, \"valid\": {\"valid/loss\": 0.5}}\n";
  CHECK_THROWS_WITH(cli::compare_runs((root / "a").string(), (root / "h").string()),
                    mlo_test::Names({"'fewshot'", "'hpo'", "one experiment"}));
  fs::remove_all(root);
}

TEST_CASE("Seed results: a damaged results.json is named, with the field of the wrong type",
          "[cli]") {
  const fs::path root = mlo_test::scratch_path("seed_stats_damaged");
  fake_run(root / "a", 0, 0.70, 0.30);
  const fs::path results = root / "a" / "seed_0" / "results.json";
  const auto with = [&](const std::string& text) {
    std::ofstream(results, std::ios::trunc) << text;
  };
  with("{\"test\": {\"acc\": 0.5");
  CHECK_THROWS_WITH(cli::read_seed_results((root / "a").string()),
                    Catch::Matchers::Contains("'" + results.string() + "' is not valid JSON"));
  with("[1, 2]");
  CHECK_THROWS_WITH(cli::read_seed_results((root / "a").string()),
                    Catch::Matchers::Contains("'" + results.string() + "' is not a JSON object"));
  with("{\"test\": [0.5]}");
  CHECK_THROWS_WITH(
      cli::read_seed_results((root / "a").string()),
      Catch::Matchers::Contains("\"test\" is not an object of metric values (it is array)"));
  with("{\"test\": {\"acc\": \"high\"}}");
  CHECK_THROWS_WITH(cli::read_seed_results((root / "a").string()),
                    Catch::Matchers::Contains("\"test\".acc is \"high\", not a number"));
  fs::remove_all(root);
}

}  // namespace seed_stats_test
