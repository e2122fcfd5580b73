// `mlo launch` on a tiny synthetic config, 2 ranks on 127.0.0.1: the run ends, only rank 0
// writes the output, every line is prefixed with its rank; a stopped run resumes (one state file
// under distributed, one per rank under zero1); a killed rank makes the launch fail, naming it,
// within the engine timeout; a rank that hangs after a forwarded SIGTERM is killed after the
// grace period; the arguments after CONFIG are read as mlo run reads them (several values per
// --set; an unknown option refused before any rank starts); WORLD_SIZE > 1 under strategy
// default is refused.
//
// NOTE: structure, exit codes and files only: whether 2 ranks match 1 process numerically is
// the engine's test (tests/core).
#include "support/names.h"
#include "support/results_json.h"
#include "support/scratch.h"
#include "support/subprocess.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace launch_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const char* kTiny = R"(experiment: reweighting
name: tiny
seed: 3
threads: 1
engine: {train_iters: 12, valid_step: 4, log_step: 1, save_step: 4, strategy: distributed,
         timeout_s: 20}
data: {dataset: synthetic, synthetic_size: 30, synthetic_test_size: 5, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 16, meta_batch_size: 10, test_batch_size: 50}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
    unroll_steps: 2
  reweighter:
    model: {name: mwn, hidden: 10}
    optimizer: {name: adam, lr: 0.01}
)";

// A scratch folder holding the tiny config; returns the folder.
fs::path scratch(const std::string& name) {
  const fs::path dir = mlo_test::scratch_dir("launch_test_" + name);
  std::ofstream(dir / "tiny.yaml") << kTiny;
  return dir;
}

struct Launch {
  int code = 0;
  std::string output;
  double seconds = 0;
};

Launch launch(const fs::path& dir, std::vector<std::string> args, const std::string& log,
              int nproc = 2, std::chrono::seconds limit = std::chrono::seconds(90)) {
  std::vector<std::string> argv{MLO_TOOL,
                                "launch",
                                "--nproc",
                                std::to_string(nproc),
                                (dir / "tiny.yaml").string(),
                                "--out",
                                (dir / "out").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto begin = std::chrono::steady_clock::now();
  const auto child = mlo_test::spawn(argv, {}, (dir / log).string());
  Launch l;
  l.code = mlo_test::wait_for(child, limit);
  l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  l.output = mlo_test::read_file(child.log);
  return l;
}

std::set<std::string> files(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

// The pid of the child of `parent` whose environment has RANK=`rank` (-1 if none yet).
pid_t rank_pid(pid_t parent, int rank) {
  std::ifstream children("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                         "/children");
  for (pid_t pid; children >> pid;) {
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (all.find(std::string("RANK=") + std::to_string(rank) + '\0') == 0 ||
        all.find(std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0') !=
            std::string::npos) {
      return pid;
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("mlo launch: 2 ranks run to the end, rank 0 alone writes, lines are prefixed",
          "[cli][dist]") {
  const fs::path dir = scratch("full");
  const Launch l = launch(dir, {"--log-all-ranks", "--no-progress"}, "launch.log");
  INFO(l.output);
  REQUIRE(l.code == 0);
  CHECK_THAT(l.output, Contains("mlo: rank 0 of 2, strategy distributed"));
  CHECK_THAT(l.output, Contains("mlo: rank 1 of 2, strategy distributed"));
  CHECK_THAT(l.output, Contains("[info] results in"));
  std::istringstream lines(l.output);
  for (std::string line; std::getline(lines, line);) {
    INFO("line: " << line);
    CHECK((line.rfind("[rank 0] ", 0) == 0 || line.rfind("[rank 1] ", 0) == 0 ||
           line.rfind("mlo launch: ", 0) == 0));
  }
  // One report, from rank 0; one state file (distributed: rank 0 saves).
  CHECK(l.output.find("] results in") == l.output.rfind("] results in"));
  CHECK(l.output.find("[rank 1] results in") == std::string::npos);
  const std::set<std::string> expected{".mlo.lock",     "config.yaml",  "log.txt",
                                       "metrics.csv",   "metrics.jsonl", "results.json",
                                       "state.pt",      "tb"};
  CHECK(files(dir / "out") == expected);
  CHECK(files(dir / "out" / "tb") == std::set<std::string>{"events.out.tfevents.mlo"});
  const auto meta = nlohmann::json::parse(
      mlo_test::read_file((dir / "out" / "results.json").string()))["meta"];
  CHECK(meta["world_size"] == 2);
  CHECK(meta["start_step"] == 0);
  const std::string log = mlo_test::read_file((dir / "out" / "log.txt").string());
  CHECK_THAT(log, Contains("rank 0 of 2"));
  CHECK(log.find("rank 1 of 2") == std::string::npos);
  CHECK_THAT(mlo_test::read_file((dir / "out" / "results.json").string()),
             Contains("\"steps\":12"));
}

TEST_CASE("mlo launch: a stopped distributed run resumes, on 2 ranks and on 1", "[cli][dist]") {
  const fs::path dir = scratch("resume");
  const Launch stop = launch(dir, {"--stop-at", "5", "--no-progress"}, "stop.log");
  INFO(stop.output);
  REQUIRE(stop.code == 0);  // stopped where asked: not an interruption
  CHECK(files(dir / "out").count("state.pt") == 1);
  CHECK(files(dir / "out").count("results.json") == 0);
  CHECK_THAT(stop.output, Contains("[rank 0] ") && Contains("stopped at global step 5"));

  // On 1 rank to step 8 (the data positions are global), then on 2 ranks to the end.
  const Launch one = launch(dir, {"--resume", "--stop-at", "8", "--no-progress"}, "one.log", 1);
  INFO(one.output);
  REQUIRE(one.code == 0);
  CHECK_THAT(one.output, Contains("resumed from") && Contains("at global step 5"));
  CHECK_THAT(one.output, Contains("stopped at global step 8"));
  const Launch resumed = launch(dir, {"--resume", "--no-progress"}, "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Contains("resumed from") && Contains("at global step 8"));
  CHECK_THAT(mlo_test::read_file((dir / "out" / "results.json").string()),
             Contains("\"steps\":12"));
  // The metrics continue: one record of the classifier per step, 1 .. 12, none twice.
  const std::string csv = mlo_test::read_file((dir / "out" / "metrics.csv").string());
  for (int step = 1; step <= 12; ++step) {
    const std::string row = "\n" + std::to_string(step) + ",classifier,loss,";
    INFO("step " << step);
    CHECK(csv.find(row) != std::string::npos);
    CHECK(csv.find(row) == csv.rfind(row));
  }
}

TEST_CASE(
    "mlo launch: zero1 saves one state per rank and resumes from them, even after a crash "
    "between two ranks' saves",
    "[cli][dist]") {
  const fs::path dir = scratch("zero1");
  const Launch stop = launch(
      dir, {"--set", "engine.strategy=zero1", "--stop-at", "6", "--no-progress"}, "stop.log");
  INFO(stop.output);
  REQUIRE(stop.code == 0);
  const auto saved = files(dir / "out");
  CHECK(saved.count("state.rank0.pt") == 1);
  CHECK(saved.count("state.rank1.pt") == 1);
  CHECK(saved.count("state.pt") == 0);
  // The save at step 4 was kept as each rank's previous state.
  CHECK(saved.count("state.rank0.prev.pt") == 1);
  CHECK(saved.count("state.rank1.prev.pt") == 1);

  // As if the run had died while saving step 6: rank 0's file still at step 4, rank 1's at 6.
  fs::rename(dir / "out" / "state.rank0.prev.pt", dir / "out" / "state.rank0.pt");
  const Launch resumed = launch(
      dir, {"--set", "engine.strategy=zero1", "--resume", "--no-progress", "--log-all-ranks"},
      "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Contains("state.rank0.pt at global step 4"));
  CHECK_THAT(resumed.output, Contains("state.rank1.prev.pt at global step 4"));
  CHECK_THAT(resumed.output, Contains("rank 1: its latest state was a save ahead"));
  CHECK_THAT(mlo_test::read_file((dir / "out" / "results.json").string()),
             Contains("\"steps\":12"));
}

TEST_CASE("mlo launch: under zero1 a rank without a state that fits makes every rank refuse at "
          "once, naming it",
          "[cli][dist]") {
  const fs::path dir = scratch("zero1_unmatched");
  const std::vector<std::string> zero1{"--set", "engine.strategy=zero1", "--no-progress",
                                       "--set", "engine.timeout_s=120"};
  auto args = zero1;
  args.insert(args.end(), {"--stop-at", "6"});
  const Launch stop = launch(dir, args, "stop.log");
  INFO(stop.output);
  REQUIRE(stop.code == 0);
  const fs::path out = dir / "out";
  const fs::path kept = dir / "kept";
  fs::copy(out, kept, fs::copy_options::recursive);
  args = zero1;
  args.push_back("--resume");

  // Rank 1 has no state at all (a node that does not see the folder's files).
  fs::remove(out / "state.rank1.pt");
  fs::remove(out / "state.rank1.prev.pt");
  Launch l = launch(dir, args, "missing.log");
  INFO(l.output);
  CHECK(l.code == 2);
  CHECK_THAT(l.output, mlo_test::Names({"[rank 0]", "rank(s) 1", "could not read"}));
  CHECK(l.seconds < 60);  // not engine.timeout_s

  // Rank 0 at step 4 only, rank 1 at step 6 with no earlier file: no common step.
  fs::remove_all(out);
  fs::copy(kept, out, fs::copy_options::recursive);
  fs::rename(out / "state.rank0.prev.pt", out / "state.rank0.pt");
  fs::remove(out / "state.rank1.prev.pt");
  l = launch(dir, args, "unmatched.log");
  INFO(l.output);
  CHECK(l.code == 2);
  CHECK_THAT(l.output, mlo_test::Names({"cannot be matched to one step", "rank 0 at step 4",
                                        "rank 1 has no state at step 4"}));
  CHECK(l.seconds < 60);
}

// Starts a long 2-rank launch of the tiny config with `timeout_s`, waits until both ranks have
// joined the group, sends `sig` to rank 1 (and then `launcher_sig` to the launcher, unless 0)
// and waits for the launch, at most 30 s. Returns its exit status (-1 when it outlived that),
// output, and the seconds from the signal to its end. Rank 1 is killed at the end in any case,
// so that a stopped rank never outlives the test.
Launch signal_rank_1(const std::string& name, int sig, const std::string& timeout_s,
                     int launcher_sig = 0) {
  const fs::path dir = scratch(name);
  std::vector<std::string> argv{MLO_TOOL,
                                "launch",
                                "--nproc",
                                "2",
                                (dir / "tiny.yaml").string(),
                                "--out",
                                (dir / "out").string(),
                                "--no-progress",
                                "--set",
                                "engine.train_iters=1000000",
                                "--set",
                                "engine.timeout_s=" + timeout_s,
                                "--set",
                                "engine.valid_step=0"};
  const auto child = mlo_test::spawn(argv, {}, (dir / "launch.log").string());
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (mlo_test::read_file(child.log).find("rank 0 of 2") != std::string::npos) {
      victim = rank_pid(child.pid, 1);
      if (victim > 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Launch l;
  if (victim <= 0) {
    mlo_test::wait_for(child, std::chrono::milliseconds(1));  // kills it
    l.code = -2;
    l.output = mlo_test::read_file(child.log);
    return l;
  }
  const auto sent = std::chrono::steady_clock::now();
  ::kill(victim, sig);
  if (launcher_sig != 0) ::kill(child.pid, launcher_sig);
  l.code = mlo_test::wait_for(child, std::chrono::seconds(30));
  l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  l.output = mlo_test::read_file(child.log);
  ::kill(victim, SIGKILL);  // normally gone already; a hung launcher would have left it stopped
  return l;
}

TEST_CASE("mlo launch: a killed rank fails the launch, naming it, within the timeout",
          "[cli][dist]") {
  const Launch l = signal_rank_1("killed", SIGKILL, "5");
  INFO(l.output);
  REQUIRE(l.code != -2);           // both ranks started
  CHECK(l.code == 128 + SIGKILL);  // the worst exit status: rank 1's
  CHECK(l.seconds < 5 + 5);        // the engine timeout, plus the launcher's polling and exit
  CHECK_THAT(l.output, mlo_test::Names({"mlo launch: rank 1 was killed by signal 9"}));
  CHECK_THAT(l.output, Contains("rank 1 failed first"));
}

TEST_CASE("mlo launch: a hanging rank is killed a timeout after the other failed", "[cli][dist]") {
  // Rank 1 stopped (SIGSTOP): rank 0's next collective times out after 2 s and fails; the
  // launcher gives rank 1 another 2 s, then kills it.
  const Launch l = signal_rank_1("hung", SIGSTOP, "2");
  INFO(l.output);
  REQUIRE(l.code != -2);
  CHECK(l.code == 128 + SIGKILL);
  CHECK(l.seconds > 2 + 2 - 0.5);
  CHECK(l.seconds < 2 + 2 + 6);
  CHECK_THAT(l.output, mlo_test::Names({"[rank 0] mlo: error:", "rank 0: all_reduce"}));
  CHECK_THAT(l.output, mlo_test::Names({"mlo launch: rank 0 exited with code 2", "have 2 s"}));
  CHECK_THAT(l.output, mlo_test::Names({"mlo launch: rank 1", "2 s after rank 0", "killing"}));
  CHECK_THAT(l.output, Contains("rank 0 failed first"));
}

TEST_CASE("mlo launch: after a forwarded SIGTERM a hanging rank is killed after the grace period",
          "[cli][dist]") {
  // Rank 1 stopped (SIGSTOP), then SIGTERM to the launcher, which forwards it: rank 0 stops at
  // its next step, but the stop agreement needs rank 1, so rank 0 fails at its 3 s timeout; the
  // launcher gives the ranks 3 s (engine.timeout_s) from the forwarding, then kills rank 1
  // (SIGKILL ends a stopped process too), and rank 0 if it has not exited by then (its timeout
  // ends at about the same moment), and fails.
  const Launch l = signal_rank_1("hung_after_signal", SIGSTOP, "3", SIGTERM);
  INFO(l.output);
  REQUIRE(l.code != -2);
  CHECK(l.code == 128 + SIGKILL);  // not -1: the launch ended by itself
  CHECK(l.seconds > 3 - 0.5);
  CHECK(l.seconds < 3 + 6);
  CHECK_THAT(l.output, mlo_test::Names({"mlo launch:", "forwarding signal 15"}));
  CHECK_THAT(l.output,
             mlo_test::Names({"mlo launch: rank 1", "3 s after signal 15", "killing"}));
  CHECK_THAT(l.output, mlo_test::Names({"mlo launch: failed: rank", "3 s of signal 15"}));
}

TEST_CASE("mlo launch: --set takes several values, as in mlo run", "[cli][dist]") {
  // The repository's HPO config runs under strategy default; only the second value of the one
  // --set makes it distributed, so a launcher that read the first value alone refuses it.
  const fs::path dir = scratch("set_values");
  const auto child = mlo_test::spawn(
      {MLO_TOOL, "launch", "--nproc", "2", MLO_SOURCE_DIR "/configs/hpo_logreg.yaml", "--out",
       (dir / "out").string(), "--no-progress", "--log-all-ranks", "--set",
       "engine.train_iters=1", "problems.inner.unroll_steps=1", "engine.strategy=distributed"},
      {}, (dir / "launch.log").string());
  const int code = mlo_test::wait_for(child, std::chrono::seconds(120));
  const std::string output = mlo_test::read_file(child.log);
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Contains("[mlo-rank1] [info] mlo: rank 1 of 2, strategy distributed"));
  CHECK_THAT(mlo_test::read_file((dir / "out" / "results.json").string()),
             Contains("\"steps\":1"));
}

TEST_CASE("mlo launch: arguments mlo run would refuse fail once, before any rank starts",
          "[cli][dist]") {
  const fs::path dir = scratch("bad_args");
  const Launch l = launch(dir, {"--no-such-option"}, "launch.log");
  INFO(l.output);
  CHECK(l.code == 2);
  CHECK_THAT(l.output, Contains("mlo launch: ") && Contains("--no-such-option"));
  CHECK(l.output.find("[rank ") == std::string::npos);
}

TEST_CASE("mlo run and mlo launch: WORLD_SIZE > 1 under strategy default is refused",
          "[cli][dist]") {
  const fs::path dir = scratch("default");
  const auto child =
      mlo_test::spawn({MLO_TOOL, "run", (dir / "tiny.yaml").string(), "--out",
                       (dir / "out").string(), "--set", "engine.strategy=default"},
                      {{"WORLD_SIZE", "2"}, {"RANK", "1"}}, (dir / "run.log").string());
  const int code = mlo_test::wait_for(child, std::chrono::seconds(30));
  const std::string output = mlo_test::read_file(child.log);
  INFO(output);
  CHECK(code == 2);
  CHECK_THAT(output, mlo_test::Names({"WORLD_SIZE=2", "engine.strategy", "default"}));
  CHECK_FALSE(fs::exists(dir / "out"));

  // `mlo launch` says so once, before starting any rank.
  const Launch l = launch(dir, {"--set", "engine.strategy=default"}, "launch.log");
  INFO(l.output);
  CHECK(l.code == 2);
  CHECK_THAT(l.output, mlo_test::Names({"mlo launch:", "--nproc 2", "engine.strategy", "default"}));
  CHECK(l.output.find("[rank ") == std::string::npos);
}

TEST_CASE("mlo launch: a global batch that does not split over the ranks is named with its key, "
          "before any rank starts",
          "[cli][dist]") {
  const fs::path dir = scratch("uneven");
  const Launch l = launch(dir, {"--no-progress"}, "launch.log", 3);
  INFO(l.output);
  CHECK(l.code == 2);
  CHECK_THAT(l.output, mlo_test::Names({"tiny.yaml:8:51:", "data.batch_size",
                                        "global batch of 16", "3 ranks", "multiple of 3"}));
  CHECK(l.output.find("[rank ") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "out"));
  // A rank started by another launcher (torchrun) refuses it the same way.
  const auto child = mlo_test::spawn(
      {MLO_TOOL, "run", (dir / "tiny.yaml").string(), "--no-progress", "--out",
       (dir / "out").string(), "--set", "engine.strategy=distributed"},
      {{"WORLD_SIZE", "3"}, {"RANK", "1"}}, (dir / "rank.log").string());
  const int code = mlo_test::wait_for(child, std::chrono::seconds(30));
  const std::string output = mlo_test::read_file(child.log);
  INFO(output);
  CHECK(code == 2);
  CHECK_THAT(output, mlo_test::Names({"data.batch_size", "global batch of 16", "3 ranks"}));
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE(
    "mlo launch: a stop inside a distributed accumulation window waits for the window's end and "
    "resumes to the uninterrupted result",
    "[cli][dist]") {
  // Under distributed, rank 0 saves for every rank, so a state saved inside an accumulation
  // window (rank 0's partial gradients) cannot be resumed. The stop at 5 (window 3 of the
  // classifier: steps 5-6) must finish the window, save at 6, and a resume must end exactly
  // where the uninterrupted run does; before, it saved at 5 over the only state and the resume
  // was refused.
  const std::vector<std::string> accumulate{"--set", "problems.classifier.gradient_accumulation=2",
                                            "--no-progress"};
  const fs::path full_dir = scratch("window_full");
  const Launch full = launch(full_dir, accumulate, "full.log");
  INFO(full.output);
  REQUIRE(full.code == 0);

  const fs::path dir = scratch("window_stop");
  std::vector<std::string> stop_args = accumulate;
  stop_args.insert(stop_args.end(), {"--stop-at", "5"});
  const Launch stop = launch(dir, stop_args, "stop.log");
  INFO(stop.output);
  REQUIRE(stop.code == 0);
  CHECK_THAT(stop.output, mlo_test::Names({"accumulation window", "finishing"}));
  CHECK_THAT(stop.output, Contains("stopped at global step 6"));

  std::vector<std::string> resume_args = accumulate;
  resume_args.push_back("--resume");
  const Launch resumed = launch(dir, resume_args, "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Contains("at global step 6"));
  CHECK(mlo_test::results_without_meta(
            mlo_test::read_file((dir / "out" / "results.json").string())) ==
        mlo_test::results_without_meta(
            mlo_test::read_file((full_dir / "out" / "results.json").string())));
}

TEST_CASE("mlo launch: a distributed run that ends inside an accumulation window keeps the "
          "previous state",
          "[cli][dist]") {
  // train_iters 7 with windows of 2 classifier steps: the run ends inside the window 7-8, whose
  // state rank 0 cannot save for every rank. The step-4 save stays, and a resume starts there.
  const std::vector<std::string> args{"--set", "problems.classifier.gradient_accumulation=2",
                                      "--set", "engine.train_iters=7", "--no-progress"};
  const fs::path dir = scratch("window_end");
  const Launch first = launch(dir, args, "first.log");
  INFO(first.output);
  REQUIRE(first.code == 0);
  CHECK_THAT(first.output,
             mlo_test::Names({"global step 7", "accumulation window", "state.pt", "previous"}));
  // The run has finished (its results are written): a resume has nothing to do, on every rank.
  std::vector<std::string> resume_args = args;
  resume_args.push_back("--resume");
  const Launch again = launch(dir, resume_args, "again.log");
  INFO(again.output);
  REQUIRE(again.code == 0);
  CHECK_THAT(again.output, Contains("has finished") && !Contains("resumed from"));
  // Asked to train longer, it goes on from the last resumable state.
  resume_args.insert(resume_args.end(), {"--set", "engine.train_iters=8"});
  const Launch resumed = launch(dir, resume_args, "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Contains("resumed from") && Contains("at global step 4"));
}

}  // namespace launch_test
