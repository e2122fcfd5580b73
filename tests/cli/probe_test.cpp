// Bad inputs and folder states given to the mlo program, one row each: every one ends with its
// exit status (2 for a refused input) and a message naming what is wrong, and leaves every
// file that was there before byte-identical (the case's folder is compared before and after,
// file by file). The table of outcomes is printed and written to probe_table.md beside the
// test program's working folder.
#include "support/subprocess.h"
#include "support/tiny_reweighting.h"

#include <mlo/build_config.h>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace probe_test {

namespace {

namespace fs = std::filesystem;

const char* kTiny = R"(experiment: hpo
name: probe
seed: 0
threads: 1
engine: {train_iters: 4, valid_step: 2, log_step: 2, save_step: 2}
data: {samples: 100, test_samples: 100, features: 5, noise: 0.1}
problems:
  inner: {optimizer: {name: sgd, lr: 0.1}, unroll_steps: 2, method: darts}
  outer: {optimizer: {name: sgd, lr: 1.0}}
)";

// Nested aliases: each of 10 levels lists the one before 10 times (10^10 values expanded).
std::string alias_bomb() {
  std::string text = "experiment: hpo\nx0: &a0 [l, l, l, l, l, l, l, l, l, l]\n";
  for (int i = 1; i < 10; ++i) {
    text += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  return text;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// Every file under `dir`, by relative path, with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    files[fs::relative(entry.path(), dir).string()] = bytes.str();
  }
  return files;
}

// A lock on a run folder held by this process, as a running `mlo run` holds it.
struct HeldLock {
  int fd = -1;
  explicit HeldLock(const fs::path& file) {
    fd = ::open(file.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd >= 0) ::flock(fd, LOCK_EX);
  }
  ~HeldLock() {
    if (fd >= 0) ::close(fd);
  }
};

struct Case {
  using Setup = std::function<std::shared_ptr<void>(const std::filesystem::path& d)>;
  Case(std::string name, Setup setup, std::vector<std::string> args, int code,
       std::string message, std::string absent = "",
       std::map<std::string, std::string> env = {})
      : name(std::move(name)),
        setup(std::move(setup)),
        args(std::move(args)),
        code(code),
        message(std::move(message)),
        absent(std::move(absent)),
        env(std::move(env)) {}

  std::string name;
  // Prepares the case's folder `d` (a finished run copied in, a file damaged, ...); what it
  // returns lives while the program runs.
  std::function<std::shared_ptr<void>(const fs::path& d)> setup;
  std::vector<std::string> args;  // "{d}" is the case's folder
  int code = 2;
  std::string message;            // a part of the program's output
  std::string absent;             // text the output must not contain ("" for none)
  std::map<std::string, std::string> env;
};

// The runs the cases start from, made once: a finished one and one stopped at step 2 of 4.
struct Runs {
  fs::path config, finished, stopped;
};

Runs make_runs(const fs::path& base) {
  Runs runs{base / "tiny.yaml", base / "finished", base / "stopped"};
  write(runs.config, kTiny);
  for (const auto& [out, extra] :
       std::vector<std::pair<fs::path, std::vector<std::string>>>{
           {runs.finished, {}}, {runs.stopped, {"--stop-at", "2"}}}) {
    std::vector<std::string> argv = {MLO_TOOL, "run", runs.config.string(), "--out", out.string(),
                                     "--no-progress"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto child = mlo_test::spawn(argv, {}, (base / "make.log").string());
    const int code = mlo_test::wait_for(child, std::chrono::seconds(120));
    INFO(mlo_test::read_file(child.log));
    REQUIRE(code == 0);
  }
  return runs;
}

std::shared_ptr<void> none(const fs::path&) { return nullptr; }

std::function<std::shared_ptr<void>(const fs::path&)> copy_of(const fs::path& run,
                                                               const std::string& as = "run") {
  return [run, as](const fs::path& d) -> std::shared_ptr<void> {
    fs::copy(run, d / as, fs::copy_options::recursive);
    return nullptr;
  };
}

std::function<std::shared_ptr<void>(const fs::path&)> config_file(const std::string& text,
                                                                  const std::string& name) {
  return [text, name](const fs::path& d) -> std::shared_ptr<void> {
    write(d / name, text);
    return nullptr;
  };
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

std::vector<Case> cases(const Runs& runs) {
  const std::string cfg = runs.config.string();
  const std::vector<std::string> run = {"run", cfg, "--no-progress", "--out", "{d}/run"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const auto set = [&](const std::string& override) { return with({"--set", override}); };
  const auto yaml = [](const std::string& from, const std::string& to) {
    return config_file(replaced(kTiny, from, to), "c.yaml");
  };
  const std::vector<std::string> run_c = {"run", "{d}/c.yaml", "--no-progress", "--out",
                                          "{d}/run"};
  std::vector<Case> table{
      // What a run folder holds is never lost.
      {"run into a folder that holds another run", copy_of(runs.finished), run, 2,
       "holds another run (metrics.csv, metrics.jsonl, results.json, state.pt); continue it "
       "with --resume, replace it with --overwrite"},
      {"run with --out the folder of the user's own config.yaml",
       config_file(std::string("# my notes\n") + kTiny, "proj/config.yaml"),
       {"run", "{d}/proj/config.yaml", "--no-progress", "--out", "{d}/proj"}, 2,
       "config.yaml' exists and was not written by a run"},
      {"a second writer on a folder in use",
       [&](const fs::path& d) -> std::shared_ptr<void> {
         copy_of(runs.stopped)(d);
         return std::make_shared<HeldLock>(d / "run" / ".mlo.lock");
       },
       with({"--resume"}), 2, "is in use by another run"},
      {"plot --out over the run's results", copy_of(runs.finished),
       {"plot", "{d}/run", "--out", "{d}/run/results.json"}, 2, "--out"},
      {"resume from an unreadable state.pt",
       [&](const fs::path& d) -> std::shared_ptr<void> {
         copy_of(runs.stopped)(d);
         write(d / "run" / "state.pt", "not a state");
         return nullptr;
       },
       with({"--resume"}), 2, "state.pt", "run without --resume"},
      {"resume from a state.pt that is a folder",
       [&](const fs::path& d) -> std::shared_ptr<void> {
         copy_of(runs.stopped)(d);
         fs::remove(d / "run" / "state.pt");
         write(d / "run" / "state.pt" / "x", "x");
         return nullptr;
       },
       with({"--resume"}), 2, "state.pt' is a folder, not a saved state"},
      {"resume with a tensor of another shape (data.features 5 -> 6)", copy_of(runs.stopped),
       with({"--resume", "--set", "data.features=6"}), 2, "does not fit this run"},
      {"resume on a folder with no run", none, with({"--resume"}), 2, "holds no run to resume"},
      {"--resume with --overwrite", copy_of(runs.stopped), with({"--resume", "--overwrite"}), 2,
       "ask for one of them"},
      {"--out names a file", config_file("x", "run"), run, 2, "is a file, not a folder"},
      {"--out ''", none, {"run", cfg, "--no-progress", "--out", ""}, 2, "--out"},
      {"resume a finished run (nothing to do)", copy_of(runs.finished), with({"--resume"}), 0,
       "has finished"},
      {"compare with a damaged results.json",
       [&](const fs::path& d) -> std::shared_ptr<void> {
         write(d / "a" / "seed_0" / "results.json", "{\"test\": ");
         write(d / "b" / "seed_0" / "results.json", "{\"test\": ");
         return nullptr;
       },
       {"compare", "{d}/a", "{d}/b"}, 2, "results.json"},
      {"compare a folder that does not exist", none, {"compare", "{d}/a", "{d}/b"}, 2, "{d}/a"},
      // The configuration file and its overrides.
      {"config file missing", none, {"run", "{d}/none.yaml", "--out", "{d}/run"}, 2,
       "does not exist"},
      {"config given as a folder", config_file("x", "folder/x"),
       {"run", "{d}/folder", "--out", "{d}/run"}, 2, "is a folder"},
      {"YAML syntax error", config_file("engine: {train_iters: 5\n", "c.yaml"), run_c, 2,
       "YAML syntax error"},
      {"duplicate YAML key", yaml("seed: 0\n", "seed: 0\nseed: 1\n"), run_c, 2, "seed"},
      {"unknown key", yaml("seed: 0\n", "seed: 0\nsede: 1\n"), run_c, 2, "unknown key"},
      {"wrong type", none, set("engine.train_iters=many"), 2, "engine.train_iters"},
      {"negative train_iters", none, set("engine.train_iters=-5"), 2, "engine.train_iters"},
      {"unknown experiment", yaml("experiment: hpo", "experiment: hpoo"), run_c, 2,
       "unknown experiment"},
      {"--set engine=~ (a null section)", none, set("engine=~"), 2, "is empty (null)"},
      {"--set without '='", none, set("seed"), 2, "expected key.path=value"},
      {"name: ../../x (outside runs/)", yaml("name: probe", "name: ../../x"),
       {"run", "{d}/c.yaml", "--no-progress"}, 2, "must be a plain name"},
      {"seed past 2^31-1 (4294967297)", none, set("seed=4294967297"), 2, "seed"},
      {"lr: 1e308 (past a float)", none, set("problems.inner.optimizer.lr=1e308"), 2,
       "problems.inner.optimizer.lr: must be at most"},
      {"lr: 0", none, set("problems.inner.optimizer.lr=0"), 2,
       "problems.inner.optimizer.lr: must be > 0"},
      {"data.features: 1e8 (too large to allocate)", none, set("data.features=100000000"), 2,
       "data.features"},
      {"gradient_accumulation past the run", none,
       set("problems.inner.gradient_accumulation=100"), 2, "takes no optimizer step"},
      {"loss-scaling option with loss scaling off", none,
       set("problems.inner.loss_scaling.init_scale=1024"), 2, "loss scaling is off"},
      // Bounds on what would hang, overflow or fail inside LibTorch.
      {"threads: 100000 (unbounded)", none, set("threads=100000"), 2, "threads: must be in [0, "},
      {"threads: 3000000000 (past an int)", none, set("threads=3000000000"), 2,
       "threads: must be in [0, "},
      {"engine.timeout_s: 1e10 (overflows the deadline)", none, set("engine.timeout_s=1e10"), 2,
       "engine.timeout_s: must be in (0, 86400]"},
      {"engine.timeout_s: 1e300", none, set("engine.timeout_s=1e300"), 2,
       "engine.timeout_s: must be in (0, 86400]"},
      {"adam beta1: 1.0", none,
       with({"--set", "problems.outer.optimizer.name=adam", "--set",
             "problems.outer.optimizer.beta1=1.0"}),
       2, "problems.outer.optimizer.beta1: must be in [0, 1), got 1"},
      {"adam beta2: 1.0", none,
       with({"--set", "problems.outer.optimizer.name=adam", "--set",
             "problems.outer.optimizer.beta2=1.0"}),
       2, "problems.outer.optimizer.beta2: must be in [0, 1), got 1"},
      {"scheduler.milestones: [2, 1, -1]", none,
       with({"--set", "problems.inner.scheduler.name=multistep", "--set",
             "problems.inner.scheduler.milestones=[2,1,-1]"}),
       2, "problems.inner.scheduler.milestones: must be optimizer steps > 0 in increasing order"},
      {"data.meta_batch_size 5000 with a meta set of 20",
       config_file(mlo_test::kTinyReweighting, "rw.yaml"),
       {"run", "{d}/rw.yaml", "--no-progress", "--out", "{d}/run", "--set",
        "data.meta_batch_size=5000"},
       2, "data.meta_batch_size: a meta batch of 5000 is larger than the meta set's 20 images"},
      {"model.hidden: 1e8 (a weight net no machine's memory holds)",
       config_file(mlo_test::kTinyReweighting, "rw.yaml"),
       {"run", "{d}/rw.yaml", "--no-progress", "--out", "{d}/run", "--set",
        "problems.reweighter.model.hidden=100000000"},
       2, "problems.reweighter.model.hidden: must be in [1, 65536], got 100000000"},
      {"data.synthetic_size: 1e9", config_file(mlo_test::kTinyReweighting, "rw.yaml"),
       {"run", "{d}/rw.yaml", "--no-progress", "--out", "{d}/run", "--set",
        "data.synthetic_size=1000000000"},
       2, "data.synthetic_size: must be in [1, 60000], got 1000000000"},
      // What the configuration file may be.
      {"a second YAML document (--- then seed: 9)",
       config_file(std::string(kTiny) + "---\nseed: 9\n", "c.yaml"), run_c, 2,
       "a second YAML document"},
      {"YAML alias bomb (10 levels of 10 aliases)", config_file(alias_bomb(), "c.yaml"), run_c, 2,
       "more than 100000 values once its aliases (*name) are expanded"},
      {"config /dev/zero (endless)", none, {"run", "/dev/zero", "--out", "{d}/run"}, 2,
       "is larger than 1 MiB"},
      // Flags.
      {"--seeds 0-1 --stop-at 2 (stops as asked: exit 0)", none,
       with({"--seeds", "0-1", "--stop-at", "2"}), 0, "stopped at seed 0 (--stop-at 2)"},
      {"--stop-at 0", none, with({"--stop-at", "0"}), 2, "--stop-at"},
      {"--stop-at -3", none, with({"--stop-at", "-3"}), 2, "--stop-at"},
      {"--seeds 0-99999999999 (unbounded)", none, with({"--seeds", "0-99999999999"}), 2,
       "--seeds"},
      {"--seeds 5-2 (empty range)", none, with({"--seeds", "5-2"}), 2, "--seeds"},
      {"plan --budget 1e30", none, {"plan", cfg, "--budget", "1e30"}, 2, "--budget"},
      {"plan --budget 1e400%", none, {"plan", cfg, "--budget", "1e400%"}, 2, "--budget"},
      {"plan --budget abc", none, {"plan", cfg, "--budget", "abc"}, 2, "--budget"},
      {"plan --max-overhead -1", none, {"plan", cfg, "--max-overhead", "-1"}, 2,
       "--max-overhead"},
      {"plan --max-overhead nan", none, {"plan", cfg, "--max-overhead", "nan"}, 2,
       "--max-overhead"},
      {"launch --max-restarts 2, an error every restart would repeat (exit 2 is final)",
       [](const fs::path& d) -> std::shared_ptr<void> {
         write(d / "rw.yaml", mlo_test::kTinyReweighting);
         return nullptr;
       },
       {"launch", "--nproc", "2", "--max-restarts", "2", "{d}/rw.yaml", "--no-progress", "--out",
        "{d}/run", "--set", "engine.strategy=distributed", "--set", "data.meta_batch_size=5000"},
       2, "mlo launch: no restart: every rank exited with code 2 on its own",
       "restarting the ranks"},
      {"launch --grace -1", none, {"launch", "--grace", "-1", cfg}, 2, "--grace"},
      {"ablate --round-seconds 5000 (past 1000)", none,
       {"ablate", cfg, "--round-seconds", "5000", "--out", "{d}/ablation"}, 2, "--round-seconds"},
      {"an unknown subcommand", none, {"frobnicate"}, 2, "unknown command 'frobnicate'"},
  };
  // The rendezvous (CPU ranks: a build with Gloo; without it the backend is refused first).
  if (MLO_WITH_GLOO) {
    table.emplace_back("launch --nproc 3 with a global batch of 16 (refused once, no rank started)",
                       config_file(mlo_test::kTinyReweighting, "rw.yaml"),
                       std::vector<std::string>{"launch", "--nproc", "3", "{d}/rw.yaml",
                                                "--no-progress", "--out", "{d}/run", "--set",
                                                "engine.strategy=distributed", "--set",
                                                "data.batch_size=16"},
                       2, "cannot be split evenly over 3 ranks", "[rank ");
    table.emplace_back("MASTER_ADDR that does not resolve", none, set("engine.strategy=distributed"),
                       2, "MASTER_ADDR='no-such-host.invalid' does not resolve", "",
                       std::map<std::string, std::string>{{"WORLD_SIZE", "2"},
                                                          {"RANK", "1"},
                                                          {"MASTER_ADDR", "no-such-host.invalid"},
                                                          {"MASTER_PORT", "29999"}});
  }
  return table;
}

std::string one_line(std::string text) {
  for (auto& c : text) {
    if (c == '\n' || c == '|') c = ' ';
  }
  return text;
}

}  // namespace

TEST_CASE("Probe: bad inputs and folder states are named errors that change no file",
          "[cli][probe]") {
  const fs::path base = fs::absolute("probe_work");
  fs::remove_all(base);
  fs::create_directories(base);
  const Runs runs = make_runs(base);
  const auto table = cases(runs);
  REQUIRE(table.size() >= 59 + MLO_WITH_GLOO);

  std::ostringstream report;
  report << "| case | exit status | message | earlier files unchanged |\n|---|---|---|---|\n";
  int i = 0;
  for (const auto& c : table) {
    const fs::path d = base / ("case_" + std::to_string(i++));
    fs::create_directories(d);
    const auto held = c.setup(d);
    const auto before = snapshot(d);
    std::vector<std::string> argv = {MLO_TOOL};
    for (auto arg : c.args) {
      for (size_t at; (at = arg.find("{d}")) != std::string::npos;) arg.replace(at, 3, d.string());
      argv.push_back(arg);
    }
    const auto child = mlo_test::spawn(argv, c.env, (base / "case.log").string());
    const auto start = std::chrono::steady_clock::now();
    const int code = mlo_test::wait_for(child, std::chrono::seconds(60));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string output = mlo_test::read_file(child.log);
    const auto after = snapshot(d);
    // Earlier files: each still there, byte-identical. New files: none for a refused input.
    bool unchanged = true;
    for (const auto& [name, bytes] : before) {
      // (the folder's lock names the process that last claimed it: a resume claims it first)
      if (fs::path(name).filename() == ".mlo.lock") continue;
      const auto found = after.find(name);
      if (found == after.end() || found->second != bytes) unchanged = false;
    }
    const bool nothing_new = c.code != 2 || after.size() == before.size();
    std::string message = output;
    for (size_t at; (at = message.find(d.string())) != std::string::npos;) {
      message.replace(at, d.string().size(), "DIR");
    }
    {
      std::string expected = c.message;
      for (size_t at; (at = expected.find("{d}")) != std::string::npos;) {
        expected.replace(at, 3, d.string());
      }
      INFO("case: " << c.name << "\noutput:\n" << output);
      CHECK(code == c.code);
      CHECK(output.find(expected) != std::string::npos);
      if (!c.absent.empty()) CHECK(output.find(c.absent) == std::string::npos);
      CHECK(unchanged);
      CHECK(nothing_new);
      CHECK(seconds < 30);
    }
    // The message's last line (the error itself), shortened for the table.
    std::string last = one_line(message.substr(0, message.find_last_not_of('\n') + 1));
    const auto line_start = message.rfind('\n', message.find_last_not_of('\n'));
    if (line_start != std::string::npos) last = one_line(message.substr(line_start + 1));
    if (last.size() > 160) last = last.substr(0, 157) + "...";
    report << "| " << c.name << " | " << code << " | " << last << " | "
           << (unchanged && nothing_new ? "yes" : "NO") << " |\n";
  }
  std::cout << report.str();
  std::ofstream(base / "probe_table.md") << report.str();
}

TEST_CASE("Probe: with stderr closed, or a pipe nobody reads, a run ends and keeps its folder",
          "[cli][probe]") {
  const fs::path base = fs::absolute("probe_streams");
  fs::remove_all(base);
  fs::create_directories(base);
  write(base / "tiny.yaml", kTiny);
  // stderr: closed (`2>&-`), or the write end of a pipe whose reader is gone (`| head -1`,
  // which makes the first write raise SIGPIPE).
  for (const bool closed : {true, false}) {
    const fs::path out = base / (closed ? "closed" : "pipe");
    const std::string log = (base / (closed ? "closed.log" : "pipe.log")).string();
    int ends[2];
    REQUIRE(::pipe(ends) == 0);
    ::close(ends[0]);
    const std::vector<std::string> argv = {MLO_TOOL, "run", (base / "tiny.yaml").string(),
                                           "--no-progress", "--out", out.string()};
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::signal(SIGPIPE, SIG_DFL);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::close(fd);
      if (closed) {
        ::close(2);
      } else {
        ::dup2(ends[1], 2);
      }
      ::close(ends[1]);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(ends[1]);
    const int code = mlo_test::wait_for(mlo_test::Child{pid, log}, std::chrono::seconds(60));
    INFO((closed ? "stderr closed" : "stderr a broken pipe") << "; stdout:\n"
                                                                << mlo_test::read_file(log));
    CHECK(code == 0);
    CHECK(fs::exists(out / "results.json"));
    CHECK(fs::exists(out / "state.pt"));
    // The folder's lock holds what names its owner, not the console log.
    const std::string lock = mlo_test::read_file((out / ".mlo.lock").string());
    CHECK(lock.rfind("process ", 0) == 0);
    CHECK(lock.find("[info]") == std::string::npos);
  }
}

TEST_CASE("Probe: --no-progress prints no progress; without it a plain line every log_step",
          "[cli][probe]") {
  const fs::path base = fs::absolute("probe_progress");
  fs::remove_all(base);
  fs::create_directories(base);
  write(base / "tiny.yaml", kTiny);
  for (const bool quiet : {true, false}) {
    const fs::path out = base / (quiet ? "quiet" : "lines");
    const std::string log = (base / (quiet ? "quiet.log" : "lines.log")).string();
    std::vector<std::string> argv = {MLO_TOOL, "run", (base / "tiny.yaml").string(), "--out",
                                     out.string()};
    if (quiet) argv.push_back("--no-progress");
    const int code =
        mlo_test::wait_for(mlo_test::spawn(argv, {}, log), std::chrono::seconds(60));
    const std::string output = mlo_test::read_file(log);
    INFO(output);
    REQUIRE(code == 0);
    // (stderr is a file here, not a terminal: no bar; log_step 2 of 4 steps)
    CHECK((output.find("progress: step 2/4") == std::string::npos) == quiet);
    CHECK((output.find("progress: step 4/4") == std::string::npos) == quiet);
    CHECK(output.find("[info] test: ") != std::string::npos);  // the log lines stay
  }
}

}  // namespace probe_test
