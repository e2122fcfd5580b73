// mlo under the launchers clusters use, on 127.0.0.1: torchrun (PyPI's, from .venv/ or
// MLO_TORCHRUN) starts `mlo run` workers that train as one process does; a worker killed
// mid-run under --max-restarts 1 is restarted and the run ends bit-identical to an
// uninterrupted one, its log naming the state it resumed from; a bad config's message reaches
// torchrun's failure summary (TORCHELASTIC_ERROR_FILE); `mlo launch --max-restarts` does the
// same restart; a SIGTERM ends a rank that waits in the rendezvous at once. The tests of several
// nodes are in launchers_netns_test.
#include "support/names.h"
#include "support/results_json.h"
#include "support/scratch.h"
#include "support/subprocess.h"
#include "support/torchrun.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace launchers_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// The main job's HPO config, short: 400 global steps (4 unrolls), a state every 100.
std::vector<std::string> hpo_args(const fs::path& out) {
  return {"run",           std::string(MLO_SOURCE_DIR) + "/configs/hpo_logreg.yaml",
          "--set",         "engine.train_iters=400",
          "--set",         "engine.save_step=100",
          "--set",         "engine.timeout_s=30",
          "--no-progress", "--out",
          out.string()};
}

struct Ran {
  int code = -1;
  std::string output;
};

Ran run(std::vector<std::string> argv, const fs::path& log,
        const std::map<std::string, std::string>& env = {},
        std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto child = mlo_test::spawn(argv, env, log.string());
  Ran r;
  r.code = mlo_test::wait_for(child, limit);
  r.output = mlo_test::read_file(child.log);
  return r;
}

std::vector<std::string> mlo_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv{MLO_TOOL};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// torchrun: MLO_TORCHRUN, else the 2.x lane's .venv/bin/torchrun; "" when neither exists.
std::string torchrun() { return mlo_test::find_torchrun(MLO_SOURCE_DIR); }

std::vector<std::string> torchrun_argv(std::vector<std::string> torchrun_args,
                                       const std::vector<std::string>& mlo_args) {
  std::vector<std::string> argv{torchrun()};
  argv.insert(argv.end(), torchrun_args.begin(), torchrun_args.end());
  argv.insert(argv.end(), {"--no-python", MLO_TOOL});
  argv.insert(argv.end(), mlo_args.begin(), mlo_args.end());
  return argv;
}

nlohmann::json results(const fs::path& out) {
  return nlohmann::json::parse(mlo_test::read_file((out / "results.json").string()));
}

// The final metrics of two runs agree within `tolerance` (relative).
void check_same_metrics(const fs::path& a, const fs::path& b, double tolerance) {
  const auto ra = results(a), rb = results(b);
  for (const char* section : {"valid", "test"}) {
    REQUIRE(ra.contains(section));
    for (const auto& [name, value] : ra[section].items()) {
      INFO(section << "/" << name);
      const double x = value.get<double>(), y = rb[section][name].get<double>();
      CHECK(std::abs(x - y) <= tolerance * std::max(1.0, std::abs(x)));
    }
  }
}

}  // namespace

TEST_CASE(
    "torchrun: 2 workers train as one process; a killed worker's restart resumes "
    "bit-identical; a bad config's error reaches torchrun's summary",
    "[dist][torchrun]") {
  if (torchrun().empty()) {
    WARN(mlo_test::kNoTorchrun);
    return;
  }
  const fs::path dir = mlo_test::scratch_dir("launchers_test_torchrun");
  const auto one = run(mlo_argv(hpo_args(dir / "one")), dir / "one.log");
  REQUIRE(one.code == 0);
  // (each torchrun on a port of its own: tests may run side by side)
  const auto standalone = [](int port) {
    return std::vector<std::string>{"--nproc-per-node", "2", "--master-port", std::to_string(port)};
  };
  auto distributed = [&](const fs::path& out) {
    auto args = hpo_args(out);
    args.insert(args.end(), {"--set", "engine.strategy=distributed"});
    return args;
  };

  const auto plain = run(torchrun_argv(standalone(mlo_test::free_port()), distributed(dir / "tr")),
                         dir / "tr.log");
  INFO(plain.output);
  REQUIRE(plain.code == 0);
  check_same_metrics(dir / "one", dir / "tr", 1e-6);

  // Worker 1 is killed at the end of step 250 (its state was saved at 200); torchrun stops the
  // other and starts both again, and they go on from step 200.
  auto killed_args = distributed(dir / "restarted");
  killed_args.insert(killed_args.end(), {"--raise-at", "250:KILL:1"});
  auto restart_args = standalone(mlo_test::free_port());
  restart_args.insert(restart_args.end(), {"--max-restarts", "1"});
  const auto restarted = run(torchrun_argv(restart_args, killed_args), dir / "restarted.log");
  INFO(restarted.output);
  REQUIRE(restarted.code == 0);
  CHECK_THAT(restarted.output,
             Contains("restart 1 by torchrun: resumed from " +
                      (dir / "restarted" / "state.pt").string() + " at global step 200"));
  CHECK(mlo_test::results_without_meta(mlo_test::read_file((dir / "tr/results.json").string())) ==
        mlo_test::results_without_meta(
            mlo_test::read_file((dir / "restarted/results.json").string())));
  CHECK(mlo_test::read_file((dir / "tr/metrics.csv").string()) ==
        mlo_test::read_file((dir / "restarted/metrics.csv").string()));

  // A config that fails its checks: torchrun's summary shows mlo's message.
  auto bad = distributed(dir / "bad");
  bad.insert(bad.end(), {"--set", "engine.train_iters=20"});
  const auto failed = run(torchrun_argv(standalone(mlo_test::free_port()), bad), dir / "bad.log");
  INFO(failed.output);
  CHECK(failed.code != 0);
  CHECK_THAT(failed.output, Contains("Root Cause"));
  CHECK_THAT(failed.output, Contains("traceback : mlo: error: ") &&
                                mlo_test::Names({"engine.train_iters: is 20"}));
  CHECK_THAT(failed.output, !Contains("To enable traceback"));
}

TEST_CASE("mlo launch --max-restarts: a killed rank's restart resumes bit-identical", "[dist]") {
  const fs::path dir = mlo_test::scratch_dir("launchers_test_launch");
  auto launch = [&](const fs::path& out, std::vector<std::string> extra) {
    auto args = hpo_args(out);
    args.erase(args.begin());  // "run"
    std::vector<std::string> argv{MLO_TOOL, "launch", "--nproc", "2", "--max-restarts", "1"};
    argv.push_back(args.front());  // CONFIG
    argv.insert(argv.end(), args.begin() + 1, args.end());
    argv.insert(argv.end(), {"--set", "engine.strategy=distributed"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, out.string() + ".log");
  };
  const auto plain = launch(dir / "plain", {});
  INFO(plain.output);
  REQUIRE(plain.code == 0);
  CHECK_THAT(plain.output, !Contains("restarting"));
  const auto restarted = launch(dir / "restarted", {"--raise-at", "250:KILL:1"});
  INFO(restarted.output);
  REQUIRE(restarted.code == 0);
  CHECK_THAT(restarted.output, Contains("mlo launch: restarting the ranks (restart 1 of at most "
                                        "1)"));
  CHECK_THAT(restarted.output, Contains("restart 1 by mlo launch: resumed from"));
  CHECK(
      mlo_test::results_without_meta(mlo_test::read_file((dir / "plain/results.json").string())) ==
      mlo_test::results_without_meta(
          mlo_test::read_file((dir / "restarted/results.json").string())));
  CHECK(mlo_test::read_file((dir / "plain/metrics.csv").string()) ==
        mlo_test::read_file((dir / "restarted/metrics.csv").string()));

  // Killed before the first save (at step 50; its metrics already hold rows): the restart
  // starts over, the failed attempt's files moved aside, and ends as the uninterrupted run.
  const auto early =
      launch(dir / "early", {"--set", "engine.log_step=10", "--raise-at", "50:KILL:1"});
  INFO(early.output);
  REQUIRE(early.code == 0);
  CHECK_THAT(early.output, Contains("restart 1 by mlo launch: no state was saved"));
  CHECK(
      mlo_test::results_without_meta(mlo_test::read_file((dir / "plain/results.json").string())) ==
      mlo_test::results_without_meta(mlo_test::read_file((dir / "early/results.json").string())));
  bool moved_aside = false;
  for (const auto& entry : fs::directory_iterator(dir / "early")) {
    moved_aside = moved_aside || (entry.path().filename().string().rfind("replaced-", 0) == 0 &&
                                  fs::exists(entry.path() / "metrics.csv"));
  }
  CHECK(moved_aside);

  // Without restarts left, the launch fails as before.
  std::vector<std::string> no_restart{MLO_TOOL,
                                      "launch",
                                      "--nproc",
                                      "2",
                                      std::string(MLO_SOURCE_DIR) + "/configs/hpo_logreg.yaml",
                                      "--set",
                                      "engine.strategy=distributed",
                                      "--set",
                                      "engine.train_iters=400",
                                      "--set",
                                      "engine.timeout_s=30",
                                      "--no-progress",
                                      "--raise-at",
                                      "150:KILL:1",
                                      "--out",
                                      (dir / "once").string()};
  const auto once = run(no_restart, dir / "once.log");
  CHECK(once.code != 0);
  CHECK_THAT(once.output, Contains("rank 1 failed first"));
}

TEST_CASE("launchers: a restart never resumes a run another launcher made", "[dist]") {
  const fs::path dir = mlo_test::scratch_dir("launchers_test_other");
  // Someone's finished run, made by a process that a shell started.
  std::string command;
  for (const auto& a : mlo_argv(hpo_args(dir / "theirs"))) command += "'" + a + "' ";
  const auto theirs = run({"/bin/sh", "-c", command}, dir / "theirs.log");
  REQUIRE(theirs.code == 0);
  const std::string before = mlo_test::read_file((dir / "theirs/results.json").string());
  // A worker restarted by another launcher (this test) with the same --out: refused, as a new
  // run would be, with the folder untouched.
  const auto restarted = run(mlo_argv(hpo_args(dir / "theirs")), dir / "restart.log",
                             {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MLO_RESTART_COUNT", "1"}});
  INFO(restarted.output);
  CHECK(restarted.code == 2);
  CHECK_THAT(restarted.output, Contains("--resume") && Contains("--overwrite"));
  CHECK(mlo_test::read_file((dir / "theirs/results.json").string()) == before);
}

TEST_CASE("launchers: a SIGTERM ends a rank that waits in the rendezvous at once", "[dist]") {
  const fs::path dir = mlo_test::scratch_dir("launchers_test_sigterm");
  // Rank 1 of 2, whose rank 0 never comes: it waits for the store up to engine.timeout_s.
  auto args = hpo_args(dir / "out");
  args.insert(args.end(), {"--set", "engine.strategy=distributed", "--set", "engine.timeout_s=120",
                           "--log-all-ranks"});
  const auto child = mlo_test::spawn(mlo_argv(args),
                                     {{"RANK", "1"},
                                      {"WORLD_SIZE", "2"},
                                      {"MASTER_ADDR", "127.0.0.1"},
                                      {"MASTER_PORT", std::to_string(mlo_test::free_port())}},
                                     (dir / "rank1.log").string());
  // It builds the experiment, then starts the run: once
  // the run's own logger speaks ("[mlo-rank1] ... device: cpu", with --log-all-ranks) its
  // signal handlers are in place, and the engine goes on to join the ranks and waits there.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const auto started = [&] {
    const std::string log = mlo_test::read_file(child.log);
    return log.find("[mlo-rank1] [info] device:") != std::string::npos;
  };
  while (!started() && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(started());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto sent = std::chrono::steady_clock::now();
  REQUIRE(::kill(child.pid, SIGTERM) == 0);
  const int code = mlo_test::wait_for(child, std::chrono::seconds(60));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  const std::string output = mlo_test::read_file(child.log);
  INFO(output);
  CHECK(code == 130);
  CHECK(seconds < 10);
  CHECK_THAT(output, Contains("mlo: interrupted: rank 1: ") && Contains("stopped by a signal"));
}

TEST_CASE("launchers: a program on MASTER_PORT that accepts and never answers ends a rank "
          "within engine.timeout_s, naming the address",
          "[dist]") {
  const fs::path dir = mlo_test::scratch_dir("launchers_test_silent");
  // The silent peer: a socket that listens on MASTER_PORT (the kernel accepts the connections
  // into its backlog) and never answers.
  const int port = mlo_test::free_port();
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  REQUIRE(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(silent, 16) == 0);
  auto args = hpo_args(dir / "out");
  args.insert(args.end(), {"--set", "engine.strategy=distributed", "--set", "engine.timeout_s=5"});
  const auto start = std::chrono::steady_clock::now();
  const auto child = mlo_test::spawn(mlo_argv(args),
                                     {{"RANK", "1"},
                                      {"WORLD_SIZE", "2"},
                                      {"MASTER_ADDR", "127.0.0.1"},
                                      {"MASTER_PORT", std::to_string(port)}},
                                     (dir / "rank1.log").string());
  const int code = mlo_test::wait_for(child, std::chrono::seconds(120));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(silent);
  const std::string output = mlo_test::read_file(child.log);
  INFO(output);
  CHECK(code == 2);
  CHECK(seconds >= 5);
  CHECK(seconds < 60);  // the timeout, the program's start and a loaded machine's slack
  CHECK_THAT(output, Contains("rank 1: ") && Contains("127.0.0.1:" + std::to_string(port)) &&
                         Contains("did not answer within 5000 ms"));
}

TEST_CASE("launchers: a failing run writes TORCHELASTIC_ERROR_FILE as torchrun reads it",
          "[dist]") {
  const fs::path dir = mlo_test::scratch_dir("launchers_test_error_file");
  auto args = hpo_args(dir / "out");
  args.insert(args.end(), {"--set", "engine.train_iters=20"});
  const fs::path error_file = dir / "error.json";
  const auto failed =
      run(mlo_argv(args), dir / "run.log", {{"TORCHELASTIC_ERROR_FILE", error_file.string()}});
  INFO(failed.output);
  CHECK(failed.code == 2);
  REQUIRE(fs::exists(error_file));
  const auto error = nlohmann::json::parse(mlo_test::read_file(error_file.string()));
  const std::string message = error.at("message").get<std::string>();
  CHECK_THAT(message, Contains("mlo: error: ") && mlo_test::Names({"engine.train_iters: is 20"}));
  CHECK_THAT(failed.output, Contains(message));
  CHECK(std::stoll(error.at("timestamp").get<std::string>()) > 1600000000);
  // Unset, nothing is written anywhere.
  const auto quiet = run(mlo_argv(args), dir / "run2.log");
  CHECK(quiet.code == 2);
}

}  // namespace launchers_test
