// `mlo run` on a tiny synthetic config: an interrupted run resumed with --resume ends exactly
// where the uninterrupted run does (bitwise on CPU at the same thread count).
#include "support/names.h"
#include "support/scratch.h"
#include "runner.h"

#include <mlo/base/build_info.h>
#include <mlo/build_config.h>
#include <mlo/io/state.h>
#include <mlo/run/yaml.h>
#include <mlo/run/experiment.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace resume_test {

namespace fs = std::filesystem;

namespace {

const char* kTiny = R"(experiment: reweighting
name: tiny
seed: 3
threads: 1
engine: {train_iters: 12, valid_step: 4, log_step: 1, save_step: 4}
data: {dataset: synthetic, synthetic_size: 30, synthetic_test_size: 5, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 16, meta_batch_size: 10, test_batch_size: 50}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
    scheduler: {name: multistep, milestones: [8], gamma: 0.5}
    unroll_steps: 2
  reweighter:
    model: {name: mwn, hidden: 10}
    optimizer: {name: adam, lr: 0.01}
)";

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path scratch(const std::string& name) {
  return mlo_test::scratch_path("resume_test_" + name);
}

}  // namespace

TEST_CASE("Resume: interrupted + resumed equals uninterrupted", "[cli][resume]") {
  const auto full_dir = scratch("full");
  const auto part_dir = scratch("part");
  mlo::RunOptions options;
  options.progress(false);

  options.dir(full_dir.string());
  const auto full =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml"), options);
  REQUIRE(full.steps == 12);

  // The same run interrupted after step 5 (in the middle of an unroll, between saves at 4 and 8),
  // then resumed to 12.
  options.dir(part_dir.string());
  options.stop_at(5);
  const auto part =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml"), options);
  REQUIRE(part.interrupted);
  REQUIRE(part.steps == 5);
  options.stop_at(0);
  options.resume(true);
  const auto resumed =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml"), options);
  REQUIRE(resumed.steps == 12);

  for (const auto& [name, value] : full.final) {
    INFO("test metric " << name);
    CHECK(resumed.final.at(name) == value);  // bitwise
  }
  for (const auto& [name, value] : full.valid) {
    INFO("validation metric " << name);
    CHECK(resumed.valid.at(name) == value);  // bitwise
  }
  // Every logged loss, weight statistic, learning rate and validation metric matches, step by
  // step; the metrics written before the interruption are kept once.
  CHECK(read(part_dir / "metrics.csv") == read(full_dir / "metrics.csv"));
}

TEST_CASE("Resume: a damaged or missing state file is refused", "[cli][resume]") {
  const auto dir = scratch("damaged");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(dir.string());
  options.resume(true);
  const auto config = mlo::run::parse_run_config(kTiny, "tiny.yaml", {"engine.train_iters=4"});
  REQUIRE_THROWS_WITH(mlo::cli::run_experiment(config, options),
                      Catch::Matchers::Contains("holds no run to resume"));

  options.resume(false);
  options.stop_at(2);  // (a run that has not finished: a finished one is not resumed)
  REQUIRE(mlo::cli::run_experiment(config, options).interrupted);
  options.stop_at(0);
  const fs::path state = dir / "state.pt";
  const auto size = fs::file_size(state);
  fs::resize_file(state, size / 2);  // as if the machine died mid-write without the rename
  options.resume(true);
  REQUIRE_THROWS_WITH(mlo::cli::run_experiment(config, options),
                      Catch::Matchers::Contains("is damaged or incomplete"));
}

namespace {

// Runs kTiny with `overrides` to the end, and again stopped after `stop_at` and resumed; the
// test metrics and every logged metric must be bitwise equal.
void check_resume_exact(const std::string& name, const std::vector<std::string>& overrides,
                        int64_t stop_at, int64_t steps) {
  const auto full_dir = scratch(name + "_full");
  const auto part_dir = scratch(name + "_part");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(full_dir.string());
  const auto full =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml", overrides), options);
  REQUIRE(full.steps == steps);

  options.dir(part_dir.string());
  options.stop_at(stop_at);
  const auto part =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml", overrides), options);
  REQUIRE(part.interrupted);
  options.stop_at(0);
  options.resume(true);
  const auto resumed =
      mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml", overrides), options);
  REQUIRE(resumed.steps == steps);
  for (const auto& [metric, value] : full.final) {
    INFO("test metric " << metric);
    CHECK(resumed.final.at(metric) == value);  // bitwise
  }
  CHECK(read(part_dir / "metrics.csv") == read(full_dir / "metrics.csv"));
}

}  // namespace

TEST_CASE("Resume: roll_back stopped mid-unroll resumes bit for bit", "[cli][resume]") {
  // The reproduction from the review: unroll 3 with roll-back, stopped after step 4 (inside the
  // second unroll, whose pre-unroll snapshot must be in the saved state), then resumed to 6.
  check_resume_exact("roll_back",
                     {"engine.train_iters=6", "engine.save_step=2",
                      "problems.classifier.unroll_steps=3", "problems.classifier.roll_back=true"},
                     /*stop_at=*/4, /*steps=*/6);
}

TEST_CASE("Resume: inside an accumulation window, frozen weight inputs and DARTS, bit for bit",
          "[cli][resume]") {
  // The weight net's inputs are frozen at the losses of the classifier's own steps; the
  // reweighter's DARTS re-evaluates the whole window (steps 5 and 6) with them after step 6.
  // Stopped after step 5, the frozen inputs of step 5 must come back with the state, or the
  // re-evaluation of batch 5 reads losses at the perturbed weights.
  check_resume_exact("frozen_window",
                     {"engine.train_iters=8", "engine.save_step=2",
                      "problems.classifier.unroll_steps=1",
                      "problems.classifier.gradient_accumulation=2",
                      "problems.classifier.method=darts", "reweighting.mwn.freeze_weight_inputs=true"},
                     /*stop_at=*/5, /*steps=*/8);
}

TEST_CASE("Run: validation rows come from the validation split; the test set only at the end",
          "[cli][valid]") {
  const auto dir = scratch("splits");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(dir.string());
  const auto config = mlo::run::parse_run_config(
      kTiny, "tiny.yaml",
      {"engine.early_stopping.enabled=true", "engine.early_stopping.tolerance=100"});
  const auto result = mlo::cli::run_experiment(config, options);
  REQUIRE(result.steps == 12);

  // metrics.csv: step,source,metric,value. Validation at 4, 8, 12 with "valid/" names; the test
  // set once, at the last step, with plain names.
  std::stringstream csv(read(dir / "metrics.csv"));
  std::string line;
  std::getline(csv, line);  // header
  std::set<int64_t> validation_steps, test_steps;
  while (std::getline(csv, line)) {
    std::stringstream fields(line);
    std::string step, source, metric;
    std::getline(fields, step, ',');
    std::getline(fields, source, ',');
    std::getline(fields, metric, ',');
    INFO(line);
    if (source == "validation") {
      validation_steps.insert(std::stoll(step));
      CHECK(metric.rfind("valid/", 0) == 0);
    } else if (source == "test") {
      test_steps.insert(std::stoll(step));
      CHECK(metric.rfind("valid/", 0) == std::string::npos);
    } else {
      CHECK(metric.rfind("valid/", 0) == std::string::npos);
    }
  }
  CHECK(validation_steps == std::set<int64_t>{4, 8, 12});
  CHECK(test_steps == std::set<int64_t>{12});

  // results.json reports the test set, and the final validation metrics beside it.
  const std::string results = read(dir / "results.json");
  CHECK_THAT(results, Catch::Matchers::Contains("\"test\":{\"acc\":"));
  CHECK_THAT(results, Catch::Matchers::Contains("\"valid\":{\"valid/acc\":"));
  CHECK(result.final.count("balanced_acc") == 1);
  CHECK(result.valid.count("valid/balanced_acc") == 1);
}

TEST_CASE("Run: restore_best evaluates the best validation's parameters, also after a resume",
          "[cli][valid][resume]") {
  // Validation every 2 steps on valid/loss (min); the final validation and the test set then
  // see the parameters of the best of them, and the final validation metrics equal that
  // validation's row bit for bit.
  const std::vector<std::string> overrides = {
      "engine.valid_step=2", "engine.early_stopping.enabled=true",
      "engine.early_stopping.tolerance=100", "engine.early_stopping.metric=valid/loss",
      "engine.early_stopping.mode=min", "problems.classifier.optimizer.lr=0.5"};
  auto rows = [](const fs::path& dir) {  // step -> validation metrics, from metrics.jsonl
    std::map<int64_t, std::map<std::string, double>> out;
    std::stringstream lines(read(dir / "metrics.jsonl"));
    std::string line;
    while (std::getline(lines, line)) {
      const auto row = nlohmann::json::parse(line);
      if (row["source"] != "validation") continue;
      for (const auto& [key, value] : row.items()) {
        if (key.rfind("valid/", 0) == 0) out[row["step"].get<int64_t>()][key] = value.get<double>();
      }
    }
    return out;
  };
  mlo::RunOptions options;
  options.progress(false);
  const auto dir = scratch("best");
  options.dir(dir.string());
  const auto config = mlo::run::parse_run_config(kTiny, "tiny.yaml", overrides);
  const auto result = mlo::cli::run_experiment(config, options);
  REQUIRE(result.steps == 12);
  const auto validations = rows(dir);
  REQUIRE(validations.size() == 6);
  int64_t best = -1;
  for (const auto& [step, m] : validations) {
    if (best < 0 || m.at("valid/loss") < validations.at(best).at("valid/loss")) best = step;
  }
  INFO("best validation at step " << best);
  REQUIRE(best < 12);  // (else the test could not tell the best from the last)
  CHECK(result.evaluated_step == best);
  for (const auto& [name, value] : validations.at(best)) {
    INFO(name);
    CHECK(result.valid.at(name) == value);
  }
  CHECK(nlohmann::json::parse(read(dir / "results.json"))["evaluated_step"] == best);

  // Stopped after step 7 and resumed: the best state was saved with the rest (the best must come
  // before the stop, else the resumed run would capture it itself).
  REQUIRE(best < 7);
  const auto part_dir = scratch("best_part");
  options.dir(part_dir.string());
  options.stop_at(7);
  REQUIRE(mlo::cli::run_experiment(config, options).interrupted);
  options.stop_at(0);
  options.resume(true);
  const auto resumed = mlo::cli::run_experiment(config, options);
  CHECK(resumed.evaluated_step == best);
  for (const auto& [name, value] : result.final) {
    INFO("test metric " << name);
    CHECK(resumed.final.at(name) == value);
  }
}

TEST_CASE("Experiment: its problems are freed with it", "[cli][run]") {
  // The classifier and reweighter hold handles to each other; a cycle left in place kept both,
  // with their models and data, alive after the experiment (found by LeakSanitizer).
  std::weak_ptr<mlo::Problem> classifier, reweighter;
  {
    auto experiment = mlo::run::make_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml"));
    classifier = experiment->problem("classifier");
    reweighter = experiment->problem("reweighter");
    REQUIRE_FALSE(classifier.expired());
  }
  REQUIRE(classifier.expired());
  REQUIRE(reweighter.expired());
}

TEST_CASE("Run: results.json records what produced it, also after a resume", "[cli][resume]") {
  const auto dir = scratch("meta");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(dir.string());
  options.command_line(std::vector<std::string>{"mlo", "run", "tiny.yaml", "--set", "a=it's"});
  options.stop_at(5);
  const auto config = mlo::run::parse_run_config(kTiny, "tiny.yaml");
  REQUIRE(mlo::cli::run_experiment(config, options).interrupted);
  CHECK_FALSE(fs::exists(dir / "results.json"));
  options.stop_at(0);
  options.resume(true);
  mlo::cli::run_experiment(config, options);
  const auto meta = nlohmann::json::parse(read(dir / "results.json")).at("meta");
  INFO(meta.dump(1));
  const mlo::BuildInfo build = mlo::build_info();
  CHECK(meta.at("mlo_version") == build.version);
  CHECK(std::regex_match(build.version, std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")));
  CHECK(meta.at("git_commit") == build.git_commit);
  CHECK(std::regex_match(build.git_commit, std::regex("[0-9a-f]{40}(-dirty)?|unknown")));
  CHECK(meta.at("libtorch") == TORCH_VERSION);
  CHECK(meta.at("cuda_build") == (MLO_WITH_CUDA != 0));
  CHECK(meta.at("device") == "cpu");
  CHECK(meta.at("threads") == 1);  // kTiny: threads 1
  CHECK(meta.at("world_size") == 1);
  CHECK(meta.at("seed") == 3);
  CHECK(meta.at("start_step") == 5);  // the resumed process's own start
  const std::regex iso("20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z");
  CHECK(std::regex_match(meta.at("started").get<std::string>(), iso));
  CHECK(std::regex_match(meta.at("finished").get<std::string>(), iso));
  CHECK(meta.at("started").get<std::string>() <= meta.at("finished").get<std::string>());
  CHECK(meta.at("command") == options.command_line());
  CHECK_FALSE(meta.at("hostname").get<std::string>().empty());
}

TEST_CASE("Resume: a saved config in other number forms is the same config; a changed one is not",
          "[cli][resume]") {
  const auto dir = scratch("config_forms");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(dir.string());
  options.stop_at(3);
  const auto config = mlo::run::parse_run_config(kTiny, "tiny.yaml");
  REQUIRE(mlo::cli::run_experiment(config, options).interrupted);
  // As an earlier writer saved it: 17 significant digits.
  std::string saved = read(dir / "config.yaml");
  const auto at = saved.find("lr: 0.05\n");
  REQUIRE(at != std::string::npos);
  saved.replace(at, 9, "lr: 0.050000000000000003\n");
  std::ofstream(dir / "config.yaml") << saved;
  options.resume(true);
  options.stop_at(6);
  REQUIRE(mlo::cli::run_experiment(config, options).interrupted);
  const std::string warning = "resuming with a configuration that differs";
  CHECK(read(dir / "log.txt").find(warning) == std::string::npos);
  // The run's record is kept as it was: a resume never writes over it.
  CHECK(read(dir / "config.yaml") == saved);
  // A real change is still reported, and the configuration the run went on with is recorded
  // beside the first.
  const auto lr = saved.find("lr: 0.050000000000000003\n");
  REQUIRE(lr != std::string::npos);
  saved.replace(lr, 25, "lr: 0.06\n");
  std::ofstream(dir / "config.yaml") << saved;
  options.stop_at(8);
  REQUIRE(mlo::cli::run_experiment(config, options).interrupted);
  CHECK(read(dir / "log.txt").find(warning) != std::string::npos);
  // The warning names the key that changed, with both values.
  CHECK(read(dir / "log.txt").find("problems.classifier.optimizer.lr (0.06 -> 0.05)") !=
        std::string::npos);
  CHECK(read(dir / "config.yaml") == saved);
  CHECK(read(dir / "config.resumed.yaml") == mlo::run::to_yaml(config));
  // Resumed again with yet another configuration: recorded beside it, named by the step it
  // resumed at; the first record stays.
  const std::string first = read(dir / "config.resumed.yaml");
  auto changed = mlo::run::parse_run_config(kTiny, "tiny.yaml", {"engine.log_step=2"});
  options.stop_at(0);
  mlo::cli::run_experiment(changed, options);
  CHECK(read(dir / "config.resumed.yaml") == first);
  CHECK(read(dir / "config.resumed.step8.yaml") == mlo::run::to_yaml(changed));
}

// Every file under `dir` with its bytes (but the lock, which names the process holding it).
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == ".mlo.lock") continue;
    out[fs::relative(entry.path(), dir).string()] = read(entry.path());
  }
  return out;
}

TEST_CASE("Resume: another run's state is refused, naming what differs, with no file changed",
          "[cli][resume]") {
  const auto base = scratch("identity");
  fs::remove_all(base);
  const auto run = [&](const std::string& name, std::vector<std::string> overrides,
                       int64_t stop_at, bool resume) {
    mlo::RunOptions options;
    options.progress(false).stop_at(stop_at).resume(resume).dir((base / name).string());
    return mlo::cli::run_experiment(mlo::run::parse_run_config(kTiny, "tiny.yaml", overrides),
                                    options);
  };
  REQUIRE(run("seed3", {}, 4, false).interrupted);
  REQUIRE(run("seed5", {"seed=5"}, 4, false).interrupted);
  REQUIRE(run("later", {}, 8, false).interrupted);
  // A seed-5 state copied into the seed-3 run's folder.
  fs::copy_file(base / "seed5" / "state.pt", base / "seed3" / "state.pt",
                fs::copy_options::overwrite_existing);
  auto before = files_of(base / "seed3");
  CHECK_THROWS_WITH(run("seed3", {}, 0, true),
                    Catch::Matchers::Contains("was saved by a run of seed 5, and this run's seed "
                                              "is 3"));
  CHECK(files_of(base / "seed3") == before);
  // Resumed with another seed than the one its own state was saved with.
  before = files_of(base / "seed5");
  CHECK_THROWS_WITH(run("seed5", {"seed=3"}, 0, true),
                    Catch::Matchers::Contains("resume with seed 5"));
  CHECK(files_of(base / "seed5") == before);
  // The same run's state from a later step (another folder's): its run had recorded metrics up
  // to step 8 (log_step 1), and this folder's end at step 4.
  fs::copy_file(base / "later" / "state.pt", base / "seed3" / "state.pt",
                fs::copy_options::overwrite_existing);
  before = files_of(base / "seed3");
  CHECK_THROWS_WITH(run("seed3", {}, 0, true),
                    Catch::Matchers::Contains("(global step 8) was saved when its run's metrics "
                                              "reached step 8, but the metrics in '" +
                                              (base / "seed3").string() + "' end at step 4"));
  CHECK(files_of(base / "seed3") == before);
  // A state of the same seed and step, saved by a run with another learning rate.
  REQUIRE(run("slower", {"problems.classifier.optimizer.lr=0.02"}, 4, false).interrupted);
  fs::copy_file(base / "slower" / "state.pt", base / "seed3" / "state.pt",
                fs::copy_options::overwrite_existing);
  before = files_of(base / "seed3");
  CHECK_THROWS_WITH(run("seed3", {}, 0, true),
                    mlo_test::Names({"state.pt", "another configuration",
                                     "problems.classifier.optimizer.lr (0.02 -> 0.05)"}));
  CHECK(files_of(base / "seed3") == before);
  // Its own state resumes.
  CHECK(run("seed5", {"seed=5"}, 0, true).steps == 12);
  // So does a run resumed with another learning rate (which its folder records), and then
  // with the first one again: its state was saved by a configuration the folder holds.
  REQUIRE(run("retuned", {}, 4, false).interrupted);
  REQUIRE(run("retuned", {"problems.classifier.optimizer.lr=0.02"}, 8, true).interrupted);
  CHECK(fs::exists(base / "retuned" / "config.resumed.yaml"));
  CHECK(run("retuned", {}, 0, true).steps == 12);
  // A run resumed with another log_step is its own: metrics every 4 steps to step 6 (a row at
  // 4), then every 5 from step 6 to 7 (none: 5 was before the resume), then on to the end.
  REQUIRE(run("spacing", {"engine.log_step=4"}, 6, false).interrupted);
  REQUIRE(run("spacing", {"engine.log_step=5"}, 7, true).interrupted);
  CHECK(run("spacing", {"engine.log_step=5"}, 0, true).steps == 12);
  fs::remove_all(base);
}

}  // namespace resume_test
