// mlo::Run (io/run.h): a program's engine as a run folder. Stopped and resumed, it ends as the
// uninterrupted run does, bit for bit; a folder that holds another run, a folder in use, and a
// configuration file of the user's are refused before anything is written.
#include <mlo/core/engine.h>
#include <mlo/io/run.h>
#include <mlo/core/problem.h>

#include "io/run_record.h"
#include "support/step_callback.h"
#include "support/scratch.h"
#include "support/text_files.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace run_test {

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// Ridge regression with a learned L2 strength: inner fits w, outer picks exp(b) on held-out data.
struct Outer;
struct Inner : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Outer> outer{this};
  torch::Tensor training_step(const mlo::Batch& b) override;
  torch::Tensor predict(const torch::Tensor& x) const {
    return module_as<torch::nn::LinearImpl>()->forward(x);
  }
};
struct Outer : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Inner> inner{this};
  torch::Tensor log_strength() const { return module().parameters()[0]; }
  torch::Tensor training_step(const mlo::Batch& b) override {
    return (inner->predict(b.data) - b.target).pow(2).mean();
  }
};
torch::Tensor Inner::training_step(const mlo::Batch& b) {
  const auto& w = module_as<torch::nn::LinearImpl>()->weight;
  return (predict(b.data) - b.target).pow(2).mean() +
         outer->log_strength().exp().sum() * w.pow(2).sum();
}

// A fresh engine over a fresh pair (the same seed: the same data and initialization), with a
// validation hook; `train_iters` global steps.
struct Program {
  std::shared_ptr<Inner> inner;
  std::shared_ptr<Outer> outer;
  std::unique_ptr<mlo::Engine> engine;
  mlo::Batch valid;
  explicit Program(int64_t train_iters = 40) {
    torch::manual_seed(3);
    const auto w = torch::randn({5, 1});
    auto make = [&](int64_t n) {
      const auto x = torch::randn({n, 5});
      return mlo::Batch(x, x.mm(w) + 0.3 * torch::randn({n, 1}));
    };
    const mlo::Batch train = make(30);
    valid = make(30);
    inner = std::make_shared<Inner>("inner", mlo::ProblemConfig().unroll_steps(4));
    inner->module(torch::nn::Linear(5, 1))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05))
        .data(std::vector<mlo::Batch>{train});
    outer = std::make_shared<Outer>("outer");
    outer->module(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)))
        .optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.05))
        .data(std::vector<mlo::Batch>{valid});
    engine = std::make_unique<mlo::Engine>(
        mlo::EngineConfig().train_iters(train_iters).valid_step(8).log_step(4));
    engine->add(outer).add(inner).link(outer, inner);
    engine->validation([this] {
      torch::NoGradGuard no_grad;
      return mlo::Metrics{{"valid/loss", outer->training_step(valid).item<double>()}};
    });
  }
  mlo::RunResult run(const fs::path& dir, bool resume = false, int64_t stop_at = 0,
                     bool overwrite = false) {
    mlo::Run run(*engine, mlo::RunOptions(dir.string())
                              .resume(resume)
                              .stop_at(stop_at)
                              .overwrite(overwrite)
                              .save_step(10)
                              .progress(false));
    return run.start();
  }
};

nlohmann::json results(const fs::path& dir) {
  auto json = nlohmann::json::parse(mlo_test::read_text(dir / "results.json"));
  json.erase("meta");  // (when and where it ran)
  return json;
}

// Every file of a folder with its bytes (run files written by a run may differ only in what a
// test says).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      out[fs::relative(entry.path(), dir).string()] = mlo_test::read_text(entry.path());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Run: a program's run folder; stopped and resumed it ends as the uninterrupted run",
          "[io][run]") {
  const auto full = mlo_test::scratch_path("run_full");
  const auto part = mlo_test::scratch_path("run_part");
  Program().run(full);
  for (const char* file : {"config.yaml", "log.txt", "metrics.csv", "metrics.jsonl",
                           "results.json", "state.pt", "tb/events.out.tfevents.mlo"}) {
    INFO(file);
    CHECK(fs::file_size(full / file) > 0);
  }
  // The engine's own configuration is the record: its keys, each problem's, the graph.
  const std::string config = mlo_test::read_text(full / "config.yaml");
  CHECK_THAT(config, Contains("engine:\n  train_iters: 40\n  valid_step: 8\n"));
  CHECK_THAT(config, Contains("  inner:\n    unroll_steps: 4\n"));
  CHECK_THAT(config, Contains("dependencies:\n  u2l:\n    outer: [inner]\n"));
  // Every upper problem's hypergradient norm reaches the metrics files.
  CHECK_THAT(mlo_test::read_text(full / "metrics.csv"), Contains("hypergrad/norm"));

  const mlo::RunResult stopped = Program().run(part, false, /*stop_at=*/23);
  CHECK(stopped.interrupted);
  CHECK_FALSE(fs::exists(part / "results.json"));
  const mlo::RunResult resumed = Program().run(part, /*resume=*/true);
  CHECK_FALSE(resumed.interrupted);
  CHECK(resumed.steps == 40);
  CHECK(results(part) == results(full));
  CHECK(mlo_test::read_text(part / "metrics.csv") ==
        mlo_test::read_text(full / "metrics.csv"));
  CHECK(resumed.valid.at("valid/loss") == results(full)["valid"]["valid/loss"].get<double>());
}

TEST_CASE("Run: resumed over a damaged or deleted metrics.csv, which is moved aside or "
          "recreated with a warning",
          "[io][run]") {
  const auto full = mlo_test::scratch_path("run_metrics_full");
  Program().run(full);
  // What the resumed run writes: the header, then the reference's rows after the saved step 23.
  std::string resumed = "step,source,metric,value\n";
  {
    std::istringstream lines(mlo_test::read_text(full / "metrics.csv"));
    std::string line;
    std::getline(lines, line);
    while (std::getline(lines, line)) {
      if (std::stoll(line.substr(0, line.find(','))) > 23) resumed += line + "\n";
    }
  }
  REQUIRE(resumed.find("\n24,") != std::string::npos);

  const auto damaged = mlo_test::scratch_path("run_metrics_damaged");
  Program().run(damaged, false, /*stop_at=*/23);
  const std::string garbage = "step;value\n1;2\nnot mlo's\n";
  std::ofstream(damaged / "metrics.csv", std::ios::binary) << garbage;
  Program().run(damaged, /*resume=*/true);
  std::vector<fs::path> aside;
  for (const auto& entry : fs::directory_iterator(damaged)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("metrics.csv.damaged-", 0) == 0) aside.push_back(entry.path());
  }
  REQUIRE(aside.size() == 1);
  CHECK(mlo_test::read_text(aside[0]) == garbage);
  CHECK(mlo_test::read_text(damaged / "metrics.csv") == resumed);
  // (the other file was mlo's: kept, and continued as the uninterrupted run's)
  CHECK(mlo_test::read_text(damaged / "metrics.jsonl") ==
        mlo_test::read_text(full / "metrics.jsonl"));
  CHECK_THAT(mlo_test::read_text(damaged / "log.txt"),
             Contains("[warning] the metrics file '" + (damaged / "metrics.csv").string() +
                      "' is not one mlo wrote (line 1 ('step;value') is not the header") &&
                 Contains("kept as it was in '" + aside[0].string() + "'"));
  // Replaced with --overwrite, the moved-aside file goes with the run's other files.
  Program().run(damaged, false, 0, /*overwrite=*/true);
  CHECK_FALSE(fs::exists(aside[0]));
  std::vector<fs::path> replaced;
  for (const auto& entry : fs::directory_iterator(damaged)) {
    if (entry.path().filename().string().rfind("replaced-", 0) == 0) {
      replaced.push_back(entry.path());
    }
  }
  REQUIRE(replaced.size() == 1);
  CHECK(mlo_test::read_text(replaced[0] / aside[0].filename()) == garbage);

  const auto deleted = mlo_test::scratch_path("run_metrics_deleted");
  Program().run(deleted, false, /*stop_at=*/23);
  fs::remove(deleted / "metrics.csv");
  Program().run(deleted, /*resume=*/true);
  CHECK(mlo_test::read_text(deleted / "metrics.csv") == resumed);
  CHECK_THAT(mlo_test::read_text(deleted / "log.txt"),
             Contains("[warning] the metrics file '" + (deleted / "metrics.csv").string() +
                      "' is missing: a new one is started with its header; the records of the "
                      "steps up to 23 (before the resume) are missing from it"));
}

TEST_CASE("Run: a folder that holds another run is refused, or moved aside with overwrite",
          "[io][run]") {
  const auto dir = mlo_test::scratch_path("run_taken");
  Program(12).run(dir);
  const auto before = snapshot(dir);
  CHECK_THROWS_WITH(Program(12).run(dir),
                    Contains("holds another run") && Contains("--resume") &&
                        Contains("--overwrite"));
  CHECK(snapshot(dir) == before);
  // A finished run has nothing to resume: nothing runs, nothing is written.
  const mlo::RunResult again = Program(12).run(dir, /*resume=*/true);
  CHECK(again.already_finished);
  CHECK(snapshot(dir) == before);
  // Replaced on request: the earlier files move into replaced-<time>/, unchanged.
  Program(12).run(dir, false, 0, /*overwrite=*/true);
  std::vector<fs::path> aside;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("replaced-", 0) == 0) aside.push_back(entry.path());
  }
  REQUIRE(aside.size() == 1);
  CHECK(mlo_test::read_text(aside[0] / "results.json") == before.at("results.json"));
  CHECK(mlo_test::read_text(aside[0] / "metrics.csv") == before.at("metrics.csv"));
}

TEST_CASE("Run: a folder in use by another run, and a user's config.yaml, are refused",
          "[io][run]") {
  const auto dir = mlo_test::scratch_path("run_locked");
  Program first(200);
  bool refused = false;
  bool checked = false;
  // While the first run lives (inside its steps), a second one on the same folder fails at once,
  // and Run::check says so before a Run is made.
  mlo_test::on_step(*first.engine, [&](int64_t step) {
    if (step == 3) {
      try {
        Program(5).run(dir);
      } catch (const mlo::Error& e) {
        refused = std::string(e.what()).find("is in use by another run (process ") !=
                  std::string::npos;
      }
      try {
        mlo::Run::check(mlo::RunOptions().dir(dir.string()).resume(true));
      } catch (const mlo::Error& e) {
        checked = std::string(e.what()).find("is in use by another run (process ") !=
                  std::string::npos;
      }
    }
    return step < 5;
  });
  first.run(dir);
  CHECK(refused);
  CHECK(checked);
  // Ended: the folder holds a run, which a new one may not use unasked; resuming it may.
  CHECK_THROWS_WITH(mlo::Run::check(mlo::RunOptions().dir(dir.string())),
                    Contains("holds another run"));
  CHECK_NOTHROW(mlo::Run::check(mlo::RunOptions().dir(dir.string()).resume(true)));

  const auto mine = mlo_test::scratch_path("run_user_config");
  fs::create_directories(mine);
  std::ofstream(mine / "config.yaml") << "# my notes\n";
  CHECK_THROWS_WITH(mlo::Run::check(mlo::RunOptions().dir(mine.string())),
                    Contains("config.yaml' exists and was not written by a run"));
  CHECK_THROWS_WITH(Program(5).run(mine),
                    Contains("config.yaml' exists and was not written by a run"));
  CHECK(mlo_test::read_text(mine / "config.yaml") == "# my notes\n");
  CHECK_FALSE(fs::exists(mine / "metrics.csv"));
}

TEST_CASE("Run: a program's command line gives the folder and --resume", "[io][run]") {
  const char* argv[] = {"prog", "out/dir", "--resume", "--stop-at", "7"};
  const auto options = mlo::RunOptions::from_command_line(5, argv, "runs/default");
  CHECK(options.dir() == "out/dir");
  CHECK(options.resume());
  CHECK(options.stop_at() == 7);
  const char* none[] = {"prog"};
  CHECK(mlo::RunOptions::from_command_line(1, none, "runs/default").dir() == "runs/default");
  const char* bad[] = {"prog", "--resum"};
  CHECK_THROWS_WITH(mlo::RunOptions::from_command_line(2, bad, "runs/x"),
                    Contains("unknown option '--resum'"));
  const char* zero[] = {"prog", "--stop-at", "0"};
  CHECK_THROWS_WITH(mlo::RunOptions::from_command_line(3, zero, "runs/x"),
                    Contains("--stop-at: must be a global step >= 1, got '0'"));
}

TEST_CASE("Run: a program's own options pass through to it, in order", "[io][run]") {
  const char* argv[] = {"prog", "--lr=0.5", "out/dir", "-v", "--resume", "--", "--stop-at", "x"};
  std::vector<std::string> mine;
  const auto options = mlo::RunOptions::from_command_line(8, argv, "runs/default", &mine);
  CHECK(options.dir() == "out/dir");
  CHECK(options.resume());
  CHECK(options.stop_at() == 0);  // after "--": the program's, not the run's
  CHECK(mine == std::vector<std::string>{"--lr=0.5", "-v", "--stop-at", "x"});
  // The run's own options are still checked.
  const char* zero[] = {"prog", "--stop-at", "0", "--mine"};
  CHECK_THROWS_WITH(mlo::RunOptions::from_command_line(4, zero, "runs/x", &mine),
                    Contains("--stop-at"));
  // A word after an option it does not know could be the folder: refused, not guessed.
  const char* spaced[] = {"prog", "--lr", "0.5"};
  CHECK_THROWS_WITH(mlo::RunOptions::from_command_line(3, spaced, "runs/x", &mine),
                    Contains("'--lr'") && Contains("--lr=VALUE"));
  const char* last[] = {"prog", "out", "--verbose"};
  mine.clear();
  CHECK(mlo::RunOptions::from_command_line(3, last, "runs/x", &mine).dir() == "out");
  CHECK(mine == std::vector<std::string>{"--verbose"});
}

TEST_CASE("Run record: the keys that change what the steps compute, in any writer's form",
          "[io][run]") {
  const std::string before =
      "seed: 0\nengine:\n  train_iters: 200\n  log_step: 10\ndata:\n  noise: 0.1\n"
      "problems:\n  inner:\n    optimizer:\n      lr: 5e-04\n      milestones: [2, 4]\n"
      "    log_step: 5\n";
  // Another run length, logging and seed, another form of the same numbers, and a key only one
  // writer has: the same arithmetic.
  const std::string same =
      "seed: 3\nengine:\n  train_iters: 400\n  log_step: 1\ndata:\n  noise: 0.10\n"
      "problems:\n  inner:\n    optimizer:\n      lr: 0.0005\n      milestones: [2, 4]\n"
      "      new_key: 1\n    log_step: 7\n";
  CHECK(mlo::io::arithmetic_changes(before, same).empty());
  const std::string other =
      "seed: 0\nengine:\n  train_iters: 200\ndata:\n  noise: 0.3\n"
      "problems:\n  inner:\n    optimizer:\n      lr: 5e-04\n      milestones: [2, 5]\n";
  CHECK(mlo::io::arithmetic_changes(before, other) ==
        "data.noise (0.1 -> 0.3), problems.inner.optimizer.milestones ([2, 4] -> [2, 5])");
}

}  // namespace run_test
