// The fault-injection matrix: every way a run can be interrupted, resumed and compared
// with the run that was not interrupted, bit for bit.
//
// For each strategy (one process; distributed, zero1, zero2 on 2 ranks under `mlo launch`) x
// the classifier's gradient accumulation (1, 2) x roll_back (with accumulation 1 only: the engine
// refuses it with 2) x method (darts; neumann on one row), and zero3 with accumulation 2 (its
// parameter shards saved per rank), the tiny reweighting experiment on
// synthetic data runs once to the end (the reference) and twice interrupted:
//   TERM: `--raise-at S:TERM` makes every process raise SIGTERM on itself at the end of global
//         step S (the real handler: save and stop, as when a scheduler signals every task);
//   KILL: `--raise-at S:KILL` (one process) or `S:KILL:1` (rank 1 of a launch) dies at once, as
//         in a crash; under a launch rank 0 then fails in its next collective;
// then resumes with --resume to the end. The steps are drawn from a fixed seed within classes
// (main, below) that cover {before the first save, after it} x {inside an accumulation window
// (with accumulation 1: inside an unroll), at its boundary}.
// Besides: a rank killed while its peer waits in a collective, a rank that hangs (SIGSTOP), a
// disk that fills while saving (RLIMIT_FSIZE: writes past it fail with EFBIG), and a truncated
// or corrupted state file.
//
// Each interruption ends as one of:
//   identical   the resumed run's results.json (less its "meta") and metrics.csv are byte for byte the reference's,
//               and its final state files (parameters, optimizer state, counters, RNG) are bit
//               for bit the same (tests/support/state_compare.h); the expected errors, if any,
//               were clear (checked);
//   refused     the resume stopped with a clear error (`mlo: error:` naming the state file, the
//               expected reason where there is one) and lost nothing: no resumable state had been
//               saved before the interruption, or (for a damaged file) the files were kept as
//               they were;
//   anything else, with its details printed; the program exits non-zero if there is any.
//
// Usage: fault_matrix --mlo build/mlo [--work DIR] [--jobs N] [--seed S] [--only TEXT] [--keep]
// CTest runs it as cli/fault_matrix (label fault_matrix): ctest -L fault_matrix.
#include "support/results_json.h"
#include "support/state_compare.h"

#include <mlo/build_config.h>
#include <torch/version.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------------------------------------
// The experiment: reweighting (a small CNN classifier and a weight net) on synthetic data, 12
// global steps, a save every 4, validation every 4. With accumulation 1 the classifier unrolls
// 2 steps (so a save can land inside an unroll, with its roll-back snapshot); with accumulation
// 2 it unrolls 1, as the shipped configs do, so the reweighter steps at the end of every window
// and re-evaluates the classifier's loss on that window's micro-batches. Either way the
// reweighter steps every 2 global steps, and every save_step is a boundary of both.

constexpr int64_t kSteps = 12;
constexpr int64_t kSaveStep = 4;

const char* kConfig = R"(experiment: reweighting
name: fault_matrix
seed: 3
threads: 1
engine: {train_iters: 12, valid_step: 4, log_step: 1, save_step: 4, timeout_s: 20}
data: {dataset: synthetic, synthetic_size: 30, synthetic_test_size: 5, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 16, meta_batch_size: 10, test_batch_size: 50}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
    scheduler: {name: multistep, milestones: [3], gamma: 0.5}
    unroll_steps: 2
  reweighter:
    model: {name: mwn, hidden: 10}
    optimizer: {name: adam, lr: 0.01}
)";

struct Row {
  std::string strategy;  // default, distributed, zero1, zero2
  int accumulation = 1;
  bool roll_back = false;
  std::string method = "darts";

  int nproc() const { return strategy == "default" ? 1 : 2; }
  int unroll() const { return accumulation > 1 ? 1 : 2; }
  std::string name() const {
    std::string n = strategy == "default" ? "one process" : strategy + " x2";
    n += " G" + std::to_string(accumulation);
    if (roll_back) n += " roll_back";
    return n + " " + method;
  }
  std::string slug() const {
    std::string s =
        strategy + "_g" + std::to_string(accumulation) + (roll_back ? "_rb" : "") + "_" + method;
    return s;
  }
  std::vector<std::string> overrides() const {
    return {"--set", "engine.strategy=" + strategy,
            "--set", "problems.classifier.gradient_accumulation=" + std::to_string(accumulation),
            "--set", std::string("problems.classifier.roll_back=") + (roll_back ? "true" : "false"),
            "--set", "problems.classifier.unroll_steps=" + std::to_string(unroll()),
            "--set", "problems.classifier.method=" + method};
  }
  // The state files a run of this row leaves (the final ones compared with the reference's).
  std::vector<std::string> state_files() const {
    if (strategy == "zero1" || strategy == "zero2" || strategy == "zero3") {
      return {"state.rank0.pt", "state.rank1.pt"};
    }
    return {"state.pt"};
  }
  // A step inside an accumulation window (accumulation 1: inside an unroll).
  bool inside(int64_t step) const { return step % (accumulation * unroll()) != 0; }
};

// The rows of two ranks need c10d's Gloo backend, which a build against a LibTorch wheel lacks
// (build_config.h): there the matrix says so and keeps the one-process rows.
std::vector<Row> matrix_rows() {
  std::vector<Row> rows;
  for (const std::string strategy : {"default", "distributed", "zero1", "zero2", "zero3"}) {
    if (strategy != "default" && !MLO_WITH_GLOO) continue;
    if (strategy == "zero3") continue;  // (below)
    rows.push_back(Row{strategy, 1, false});
    rows.push_back(Row{strategy, 1, true});
    rows.push_back(Row{strategy, 2, false});
  }
  if (MLO_WITH_GLOO) {
    rows.push_back(Row{"distributed", 2, false, "neumann"});
    // One zero3 row (its parameter shards saved per rank), with accumulation: the matrix's time
    // bound. (Its steps are drawn last, so the other cases keep theirs: see main.)
    rows.push_back(Row{"zero3", 2, false});
  } else {
    std::printf("fault matrix: the rows on 2 ranks (distributed, zero1, zero2, zero3) are skipped: this "
                "build has no Gloo backend (LibTorch %s ships no Gloo headers)\n",
                TORCH_VERSION);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Processes.

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string tail(const std::string& text, size_t lines = 12) {
  size_t at = text.size();
  for (size_t n = 0; n <= lines && at != std::string::npos && at > 0; ++n) {
    at = text.rfind('\n', at - 1);
  }
  return at == std::string::npos ? text : text.substr(at + 1);
}

struct Spawn {
  std::vector<std::string> argv;
  fs::path log;
  int64_t file_size_limit = -1;  // RLIMIT_FSIZE in bytes (SIGXFSZ ignored), -1: none
};

struct Finished {
  int code = 0;  // exit status, 128 + signal when killed, -1 when it outlived its time limit
  std::string output;
  double seconds = 0;
};

// Starts a program with its stdout and stderr in `log`, OMP_NUM_THREADS=1.
pid_t start(const Spawn& s) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env.emplace_back(*e);
  }
  env.emplace_back("OMP_NUM_THREADS=1");
  std::vector<char*> envp, args;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const auto& a : s.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string log = s.log.string();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec (the parent has threads).
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (s.file_size_limit >= 0) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ::sigaction(SIGXFSZ, &ignore, nullptr);  // stays ignored across exec: writes fail, EFBIG
      const rlimit limit{static_cast<rlim_t>(s.file_size_limit),
                         static_cast<rlim_t>(s.file_size_limit)};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// The children of `pid` (threads' children included).
std::vector<pid_t> children(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "children");
    for (pid_t child; in >> child;) out.push_back(child);
  }
  return out;
}

void kill_tree(pid_t pid) {
  for (pid_t child : children(pid)) kill_tree(child);
  ::kill(pid, SIGKILL);
  ::kill(pid, SIGCONT);
}

// Waits for `pid` at most `limit` (then kills it and everything it started: code -1).
int wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (Clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill_tree(pid);
  ::waitpid(pid, &status, 0);
  return -1;
}

Finished run(const Spawn& s, std::chrono::seconds limit = std::chrono::seconds(150)) {
  const auto begin = Clock::now();
  Finished f;
  f.code = wait_for(start(s), limit);
  f.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  f.output = read_file(s.log);
  return f;
}

// The pid of the child of launcher `parent` whose environment has RANK=`rank` (-1: none yet).
pid_t rank_pid(pid_t parent, int rank) {
  const std::string wanted = "RANK=" + std::to_string(rank);
  for (pid_t pid : children(parent)) {
    const std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
    std::stringstream entries(env);
    for (std::string entry; std::getline(entries, entry, '\0');) {
      if (entry == wanted) return pid;
    }
  }
  return -1;
}

// The state letter of /proc/<pid>/stat ('T': stopped), or 0 when it is gone.
char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? 0 : stat[paren + 2];
}

// Waits until `predicate` holds (polling) or `limit` passes; returns whether it held.
bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return predicate();
}

// ---------------------------------------------------------------------------------------------
// Outcomes.

enum class Outcome { kIdentical, kRefused, kElse, kSkipped };

struct Result {
  std::string group;  // table row
  std::string what;   // the interruption, e.g. "TERM at step 5 (inside a window, after ...)"
  Outcome outcome = Outcome::kElse;
  std::string detail;  // why, for anything else / refused / skipped
  double seconds = 0;
};

struct Context {
  std::string mlo;
  fs::path work;
  fs::path config;
};

// The command line of a run of `row` into `out` (through `mlo launch` on 2 ranks, else `mlo run`).
std::vector<std::string> command(const Context& c, const Row& row, const fs::path& out,
                                 const std::vector<std::string>& extra,
                                 const std::vector<std::string>& launch_options = {}) {
  std::vector<std::string> argv{c.mlo};
  if (row.nproc() > 1) {
    argv.insert(argv.end(), {"launch", "--nproc", std::to_string(row.nproc())});
    argv.insert(argv.end(), launch_options.begin(), launch_options.end());
  } else {
    argv.push_back("run");
  }
  argv.insert(argv.end(), {c.config.string(), "--out", out.string(), "--no-progress"});
  const auto o = row.overrides();
  argv.insert(argv.end(), o.begin(), o.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Where two texts first differ: the line (metrics.csv) or, for one long line (results.json),
// the characters around the first difference.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  const size_t begin = a.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t from = begin == std::string::npos ? (at > 60 ? at - 60 : 0) : begin + 1;
  const auto piece = [&](const std::string& t) {
    const size_t end = std::min(t.find('\n', at), from + 160);
    return from >= t.size() ? std::string("(end)") : t.substr(from, end - from);
  };
  return "[" + piece(a) + "] vs [" + piece(b) + "]";
}

// "" when the finished run in `out` matches the reference in `reference`, else what differs
// (each file that differs, and where).
std::string compare_runs(const Row& row, const fs::path& reference, const fs::path& out) {
  std::string differences;
  const auto add = [&](const std::string& d) {
    differences += (differences.empty() ? "" : "\n") + d;
  };
  for (const std::string file : {"results.json", "metrics.csv"}) {
    if (!fs::exists(out / file)) {
      add(file + " is missing");
      continue;
    }
    // (results.json: the results, not the metadata of the process that wrote them)
    const bool results = file == "results.json";
    const std::string mine = results ? mlo_test::results_without_meta(read_file(out / file))
                                     : read_file(out / file);
    const std::string theirs = results
                                   ? mlo_test::results_without_meta(read_file(reference / file))
                                   : read_file(reference / file);
    if (mine != theirs) {
      add(file + " differs from the uninterrupted run's: " + first_difference(theirs, mine));
    }
  }
  for (const auto& file : row.state_files()) {
    if (!fs::exists(out / file)) {
      add("the final " + file + " is missing");
      continue;
    }
    try {
      const std::string d =
          mlo_test::state_file_difference((reference / file).string(), (out / file).string());
      if (!d.empty()) add("final " + file + ": " + d);
    } catch (const std::exception& e) {
      add("the final " + file + " cannot be read: " + e.what());
    }
  }
  return differences;
}

// The lines of `output` holding "mlo: error:" or "mlo: failed:" (under a launch, one per rank
// that failed, in the order they came).
std::vector<std::string> error_lines(const std::string& output) {
  std::stringstream lines(output);
  std::vector<std::string> found;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("mlo: error:") != std::string::npos ||
        line.find("mlo: failed:") != std::string::npos) {
      found.push_back(line);
    }
  }
  return found;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// Whether `line` names one of the run's state files, quoted as mlo quotes paths.
bool names_state_file(const std::string& line, const fs::path& out) {
  for (const std::string name : {"state.pt", "state.rank0.pt", "state.rank1.pt",
                                 "state.rank0.prev.pt", "state.rank1.prev.pt"}) {
    if (line.find("'" + (out / name).string() + "'") != std::string::npos) return true;
  }
  return false;
}

// The first error line that names a state file and holds `expected` ("" if none does).
std::string clear_error(const std::vector<std::string>& lines, const fs::path& out,
                        const std::string& expected) {
  for (const auto& line : lines) {
    if (names_state_file(line, out) && line.find(expected) != std::string::npos) return line;
  }
  return "";
}

std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("state", 0) == 0) files[name] = read_file(e.path());
  }
  return files;
}

// A resume that ended with an error: "refused" when the error is clear (names the state file,
// holds `expected` where given) and nothing resumable was lost; else anything else.
Result judge_refusal(Result r, const Finished& resumed, const fs::path& out, bool had_state,
                     const std::string& expected) {
  const std::vector<std::string> lines = error_lines(resumed.output);
  if (lines.empty()) {
    r.detail = "the resume failed (exit " + std::to_string(resumed.code) +
               ") without an mlo error line:\n" + tail(resumed.output);
    return r;
  }
  const std::string line = clear_error(lines, out, expected);
  std::string wrong;
  if (line.empty()) {
    wrong = "no error names the state file" +
            (expected.empty() ? std::string() : " and holds [" + expected + "]");
  }
  if (had_state) {
    wrong += std::string(wrong.empty() ? "" : "; ") +
             "a resumable state had been saved before the interruption, and it was lost";
  }
  if (!wrong.empty()) {
    r.detail = "the resume was refused: " + wrong + ":\n" + join(lines);
    return r;
  }
  r.outcome = Outcome::kRefused;
  r.detail = line;
  return r;
}

std::string describe_step(const Row& row, int64_t step) {
  std::string where =
      row.inside(step) ? (row.accumulation > 1 ? "inside a window" : "inside an unroll")
                       : (row.accumulation > 1 ? "at a window boundary" : "at an unroll boundary");
  return "step " + std::to_string(step) + " (" + where + ", " +
         (step <= kSaveStep ? "before the first save" : "after the first save") + ")";
}

// One interruption of the matrix: `signal` ("TERM" or "KILL") at the end of `step`, then resume.
Result interruption(const Context& c, const Row& row, const std::string& signal, int64_t step) {
  Result r;
  r.group = row.name();
  r.what = signal + " at " + describe_step(row, step);
  const fs::path dir = c.work / row.slug() / (signal + "_" + std::to_string(step));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "out";
  const bool launched = row.nproc() > 1;
  std::string raise = std::to_string(step) + ":" + signal;
  if (launched && signal == "KILL") raise += ":1";  // one rank crashes; its peer must notice
  const Finished first =
      run({command(c, row, out, {"--raise-at", raise}), dir / "interrupted.log"});
  r.seconds += first.seconds;
  const int expected_code = signal == "TERM" ? 130 : 128 + SIGKILL;
  if (first.code != expected_code) {
    r.detail = "the interrupted run exited with " + std::to_string(first.code) + ", expected " +
               std::to_string(expected_code) + ":\n" + tail(first.output);
    return r;
  }
  if (signal == "TERM") {
    // Where it stopped: at the step, or (finishing the window first) at most a window later.
    const std::string said = "interrupted at global step ";
    const size_t at = first.output.find(said);
    const int64_t stopped =
        at == std::string::npos ? -1 : std::atoll(first.output.c_str() + at + said.size());
    if (stopped < step || stopped > step + row.accumulation * row.unroll()) {
      r.detail = "the interrupted run did not say it stopped at step " + std::to_string(step) +
                 " (or within a window after it):\n" + tail(first.output);
      return r;
    }
    if (stopped != step) r.what += "; stopped at " + std::to_string(stopped);
  }
  if (launched && signal == "KILL" &&
      first.output.find("mlo launch: rank 1 was killed by signal 9") == std::string::npos) {
    r.detail = "the launch did not name the killed rank:\n" + tail(first.output);
    return r;
  }
  const Finished resumed = run({command(c, row, out, {"--resume"}), dir / "resumed.log"});
  r.seconds += resumed.seconds;
  if (resumed.code == 0) {
    const std::string difference =
        compare_runs(row, c.work / row.slug() / "reference" / "out", out);
    if (difference.empty()) {
      r.outcome = Outcome::kIdentical;
    } else {
      r.detail = "resumed to the end, but:\n" + difference;
    }
    return r;
  }
  // A periodic save came before the interruption when the step is past the first save.
  const bool had_state = step > kSaveStep;
  const std::string expected = signal == "KILL" && !had_state ? "no saved state at" : "";
  return judge_refusal(r, resumed, out, had_state, expected);
}

// ---------------------------------------------------------------------------------------------
// The cases beyond the matrix.

// Runs `row` stopped at `stop_at` (--stop-at: a saved state at that step) into `dir`/out.
std::optional<std::string> stopped_run(const Context& c, const Row& row, const fs::path& dir,
                                       int64_t stop_at, double* seconds) {
  const Finished f = run(
      {command(c, row, dir / "out", {"--stop-at", std::to_string(stop_at)}), dir / "stopped.log"});
  *seconds += f.seconds;
  if (f.code != 0) {
    return "the run to be damaged (--stop-at " + std::to_string(stop_at) + ") exited with " +
           std::to_string(f.code) + ":\n" + tail(f.output);
  }
  return std::nullopt;
}

// Resumes into `dir`/out and compares with the reference: identical or anything else.
Result resume_and_compare(const Context& c, const Row& row, const fs::path& dir, Result r,
                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"--resume"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Finished resumed = run({command(c, row, dir / "out", args), dir / "resumed.log"});
  r.seconds += resumed.seconds;
  if (resumed.code != 0) {
    r.outcome = Outcome::kElse;
    r.detail =
        "the resume failed (exit " + std::to_string(resumed.code) + "):\n" + tail(resumed.output);
    return r;
  }
  const std::string difference =
      compare_runs(row, c.work / row.slug() / "reference" / "out", dir / "out");
  if (difference.empty()) {
    r.outcome = Outcome::kIdentical;
  } else {
    r.outcome = Outcome::kElse;
    r.detail = "resumed to the end, but:\n" + difference;
  }
  return r;
}

// Rank 0 stops itself (SIGSTOP) at the end of `step`, so rank 1 waits in the step's stop
// agreement (an all-reduce); rank 1 is killed there, rank 0 continued: its collective must fail
// at once naming the dead peer, the launch must name rank 1. Then resume.
Result killed_mid_collective(const Context& c, const Row& row, int64_t step) {
  Result r;
  r.group = "rank killed mid-collective";
  r.what = row.name() + ": rank 1 SIGKILLed while in the all-reduce of " + describe_step(row, step);
  const fs::path dir = c.work / ("mid_collective_" + row.slug());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Spawn s{command(c, row, dir / "out", {"--raise-at", std::to_string(step) + ":STOP:0"}),
                dir / "interrupted.log"};
  const auto begin = Clock::now();
  const pid_t launcher = start(s);
  pid_t rank0 = -1, rank1 = -1;
  const bool stopped = wait_until(
      [&] {
        if (rank0 <= 0) rank0 = rank_pid(launcher, 0);
        if (rank1 <= 0) rank1 = rank_pid(launcher, 1);
        return rank0 > 0 && rank1 > 0 && process_state(rank0) == 'T';
      },
      std::chrono::seconds(120));
  if (!stopped) {
    wait_for(launcher, std::chrono::milliseconds(1));
    r.detail =
        "rank 0 never stopped at step " + std::to_string(step) + ":\n" + tail(read_file(s.log));
    return r;
  }
  // Rank 1 finishes the step and blocks in the agreement's all-reduce, waiting for rank 0
  // (sleeping, not running, for a while).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  wait_until([&] { return process_state(rank1) == 'S'; }, std::chrono::seconds(10));
  const char rank1_state = process_state(rank1);
  ::kill(rank1, SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(rank0, SIGCONT);
  const int code = wait_for(launcher, std::chrono::seconds(60));
  r.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  const std::string output = read_file(s.log);
  if (rank1_state != 'S') {
    r.detail = std::string("rank 1 was not waiting (state '") + rank1_state +
               "') when it was killed:\n" + tail(output);
    return r;
  }
  if (code != 128 + SIGKILL ||
      output.find("mlo launch: rank 1 was killed by signal 9") == std::string::npos ||
      output.find("[rank 0] mlo: error: rank 0: ") == std::string::npos ||
      output.find("failed (a peer rank died") == std::string::npos) {
    r.detail =
        "expected exit 137, rank 1 named as killed and rank 0's collective failing on "
        "its dead peer; got exit " +
        std::to_string(code) + ":\n" + tail(output);
    return r;
  }
  return resume_and_compare(c, row, dir, r);
}

// Rank 1 stops itself (hangs) at the end of `step`: rank 0's next collective times out (5 s),
// the launcher kills rank 1 after its grace (1 s) and names rank 0 as failed first. Then resume.
Result hanging_rank(const Context& c, const Row& row, int64_t step) {
  Result r;
  r.group = "rank hangs (SIGSTOP)";
  r.what = row.name() + ": rank 1 stops itself at " + describe_step(row, step);
  const fs::path dir = c.work / ("hang_" + row.slug());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Finished hung =
      run({command(c, row, dir / "out",
                   {"--raise-at", std::to_string(step) + ":STOP:1", "--set", "engine.timeout_s=5"},
                   {"--grace", "1"}),
           dir / "interrupted.log"},
          std::chrono::seconds(60));
  r.seconds += hung.seconds;
  if (hung.code != 128 + SIGKILL ||
      hung.output.find("[rank 0] mlo: error: rank 0: ") == std::string::npos ||
      hung.output.find("hangs or is slower than the timeout of 5000 ms") == std::string::npos ||
      hung.output.find("mlo launch: rank 1 still runs 1 s after rank 0 failed; killing it") ==
          std::string::npos) {
    r.detail =
        "expected rank 0 to time out naming the hang and the launcher to kill rank 1 "
        "(exit 137); got exit " +
        std::to_string(hung.code) + ":\n" + tail(hung.output);
    return r;
  }
  return resume_and_compare(c, row, dir, r);
}

// The disk fills while saving: a run stopped at step 4 (saved), resumed under a file-size limit
// of half the state file, fails at its save at step 8; the error must name the state file, and
// the state saved at step 4 must be kept (no temporary file left behind); a resume without the
// limit must then match.
Result full_disk(const Context& c, const Row& row) {
  Result r;
  r.group = "disk full while saving";
  r.what = row.name() + ": the save at step 8 hits RLIMIT_FSIZE";
  const fs::path dir = c.work / ("full_disk_" + row.slug());
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (auto failed = stopped_run(c, row, dir, kSaveStep, &r.seconds)) {
    r.detail = *failed;
    return r;
  }
  const fs::path out = dir / "out";
  const std::string state = row.state_files().front();
  const auto before = snapshot(out);
  const int64_t state_bytes = static_cast<int64_t>(fs::file_size(out / state));
  int64_t others = 0;  // the largest file the run appends to
  // (the TensorBoard event file is rewritten whole when the run resumes)
  for (const std::string f :
       {"log.txt", "metrics.csv", "metrics.jsonl", "tb/events.out.tfevents.mlo"}) {
    if (!fs::exists(out / f)) continue;
    others = std::max<int64_t>(others, static_cast<int64_t>(fs::file_size(out / f)));
  }
  const int64_t limit = state_bytes / 2;
  if (limit < 4 * others) {
    r.outcome = Outcome::kSkipped;
    r.detail = "the state file (" + std::to_string(state_bytes) +
               " bytes) is too small next to "
               "the logs (" +
               std::to_string(others) + " bytes) for a file-size limit between them";
    return r;
  }
  Spawn s{command(c, row, out, {"--resume"}), dir / "full.log", limit};
  const Finished full = run(s);
  r.seconds += full.seconds;
  const std::string line = clear_error(error_lines(full.output), out, "");
  const fs::path kept = out / (row.nproc() > 1 ? "state.rank0.prev.pt" : "state.pt");
  if (full.code == 0 || line.empty()) {
    r.detail = "expected the save to fail with an error naming the state file; got exit " +
               std::to_string(full.code) + ":\n" + tail(full.output);
    return r;
  }
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.path().extension() == ".tmp") {
      r.detail = "the failed save left " + entry.path().filename().string() + " behind: " + line;
      return r;
    }
  }
  if (!fs::exists(kept) || read_file(kept) != before.at(state)) {
    r.detail = "the state saved at step 4 was not kept as " + kept.filename().string() +
               " after the failed save: " + line;
    return r;
  }
  r.detail = line;
  return resume_and_compare(c, row, dir, r);
}

// A damaged state file: `damage` changes it; the resume must be refused naming the file, and the
// state files must be left as they were.
Result damaged_state(const Context& c, const Row& row, const std::string& name,
                     const std::string& file, int64_t stop_at,
                     const std::function<void(const fs::path&)>& damage) {
  Result r;
  r.group = "damaged state file";
  r.what =
      row.name() + ": " + name + " " + file + " (saved at step " + std::to_string(stop_at) + ")";
  const fs::path dir = c.work / ("damaged_" + name + "_" + row.slug());
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (auto failed = stopped_run(c, row, dir, stop_at, &r.seconds)) {
    r.detail = *failed;
    return r;
  }
  const fs::path out = dir / "out";
  damage(out / file);
  const auto before = snapshot(out);
  const Finished resumed = run({command(c, row, out, {"--resume"}), dir / "resumed.log"});
  r.seconds += resumed.seconds;
  if (resumed.code == 0) {
    const std::string difference =
        compare_runs(row, c.work / row.slug() / "reference" / "out", out);
    r.detail = "the damaged " + file + " was loaded without an error, and the run " +
               (difference.empty() ? std::string("still matched the reference")
                                   : "then differed: " + difference);
    return r;
  }
  r = judge_refusal(r, resumed, out, /*had_state=*/false, "'" + (out / file).string() + "'");
  if (r.outcome == Outcome::kRefused && snapshot(out) != before) {
    r.outcome = Outcome::kElse;
    r.detail = "the refused resume changed the state files: " + r.detail;
  }
  return r;
}

void truncate_half(const fs::path& file) { fs::resize_file(file, fs::file_size(file) / 2); }

// Flips every bit of 16 bytes in the middle of the file (inside the largest tensors' data).
void corrupt_middle(const fs::path& file) {
  std::string bytes = read_file(file);
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16 && i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(~bytes[i]);
  }
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

// ---------------------------------------------------------------------------------------------
// Scheduling: tasks run in parallel within a budget of cores (a launch takes one per rank).

struct Task {
  int cores = 1;
  std::function<void()> body;
};

void run_tasks(std::vector<Task>& tasks, int cores) {
  std::mutex mutex;
  std::condition_variable freed;
  int free_cores = cores;
  size_t next = 0;
  const auto worker = [&] {
    for (;;) {
      Task* task = nullptr;
      int need = 0;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (next == tasks.size()) return;
        task = &tasks[next++];
        need = std::min(task->cores, cores);
        freed.wait(lock, [&] { return free_cores >= need; });
        free_cores -= need;
      }
      task->body();
      {
        std::lock_guard<std::mutex> lock(mutex);
        free_cores += need;
      }
      freed.notify_all();
    }
  };
  std::vector<std::thread> workers;
  for (int i = 0; i < cores; ++i) workers.emplace_back(worker);
  for (auto& w : workers) w.join();
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kIdentical:
      return "identical";
    case Outcome::kRefused:
      return "refused (clear error)";
    case Outcome::kSkipped:
      return "SKIPPED";
    default:
      return "ANYTHING ELSE";
  }
}

}  // namespace

int main(int argc, char** argv) {
  Context c;
  c.work = fs::temp_directory_path() / ("mlo_fault_matrix_" + std::to_string(::getpid()));
  // NOTE: two processes per core: each runs one thread, and spends much of its short life
  // starting, joining its group or waiting for a peer (measured: 116 s with 4 jobs on 2 cores,
  // 229 s with 2).
  int jobs = 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  uint32_t seed = 18;
  std::string only;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "fault_matrix: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--mlo") {
      c.mlo = value();
    } else if (a == "--work") {
      c.work = value();
    } else if (a == "--jobs") {
      jobs = std::max(1, std::stoi(value()));
    } else if (a == "--seed") {
      seed = static_cast<uint32_t>(std::stoul(value()));
    } else if (a == "--only") {
      only = value();
    } else if (a == "--keep") {
      keep = true;
    } else {
      std::cerr << "usage: fault_matrix --mlo PATH [--work DIR] [--jobs N] [--seed S] "
                   "[--only TEXT] [--keep]\n";
      return 2;
    }
  }
  if (c.mlo.empty() || !fs::exists(c.mlo)) {
    std::cerr << "fault_matrix: give the mlo program with --mlo (got '" << c.mlo << "')\n";
    return 2;
  }
  c.mlo = fs::absolute(c.mlo).string();
  fs::remove_all(c.work);
  fs::create_directories(c.work);
  c.config = c.work / "fault_matrix.yaml";
  std::ofstream(c.config) << kConfig;
  const auto begin = Clock::now();

  // The steps, drawn from the seed within the classes each row's interruptions must fall in:
  //   TERM (its state is saved where it lands): with accumulation 2 inside a window; with 1,
  //     inside an unroll or at its boundary, by pairs of rows; after the first save or before
  //     it, alternately by row;
  //   KILL (a crash resumes from the last save, wherever it lands): before the first save in
  //     every third row (nothing to resume: refused), after it in the others.
  const std::vector<Row> rows = matrix_rows();
  std::mt19937 rng(seed);
  struct Planned {
    Row row;
    std::string signal;
    int64_t step;
  };
  std::vector<Planned> planned;
  const auto draw = [&](const Row& row, bool after, std::optional<bool> inside) {
    std::vector<int64_t> pool;
    for (int64_t s = 1; s < kSteps; ++s) {
      if ((s > kSaveStep) == after && (!inside || row.inside(s) == *inside)) pool.push_back(s);
    }
    return pool[rng() % pool.size()];
  };
  const auto plan = [&](size_t i) {
    const Row& row = rows[i];
    const bool term_inside = row.accumulation > 1 || (i / 2) % 2 == 0;
    planned.push_back({row, "TERM", draw(row, i % 2 == 0, term_inside)});
    planned.push_back({row, "KILL", draw(row, i % 3 != 0, std::nullopt)});
  };
  const auto drawn_last = [](const Row& row) { return row.strategy == "zero3"; };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!drawn_last(rows[i])) plan(i);
  }
  const auto wanted = [&](const std::string& name) {
    return only.empty() || name.find(only) != std::string::npos;
  };

  std::mutex results_mutex;
  std::vector<Result> results;
  std::map<std::string, bool> reference_ok;
  size_t done = 0;
  const auto record = [&](Result r) {
    std::lock_guard<std::mutex> lock(results_mutex);
    ++done;
    std::fprintf(stderr, "[%zu] %-32s %-58s %-22s %5.1f s\n", done, r.group.c_str(), r.what.c_str(),
                 outcome_name(r.outcome), r.seconds);
    results.push_back(std::move(r));
  };

  // Every case compares with its row's uninterrupted run: those run first.
  std::vector<Task> references, cases;
  std::vector<std::string> referenced;
  const auto add_reference = [&](const Row& row) {
    if (std::find(referenced.begin(), referenced.end(), row.slug()) != referenced.end()) return;
    referenced.push_back(row.slug());
    references.push_back(
        {row.nproc(), [&, row] {
           const fs::path dir = c.work / row.slug() / "reference";
           fs::create_directories(dir);
           const Finished f = run({command(c, row, dir / "out", {}), dir / "run.log"});
           std::lock_guard<std::mutex> lock(results_mutex);
           reference_ok[row.slug()] = f.code == 0;
           std::fprintf(stderr, "[reference] %-32s exit %d, %.1f s\n", row.name().c_str(), f.code,
                        f.seconds);
           if (f.code != 0) std::fprintf(stderr, "%s\n", tail(f.output).c_str());
         }});
  };
  const auto add_case = [&](const Row& row, std::function<Result()> body) {
    add_reference(row);
    cases.push_back({row.nproc(), [&, row, body] {
                       const auto ok = reference_ok.find(row.slug());
                       if (ok == reference_ok.end() || !ok->second) {
                         Result r;
                         r.group = row.name();
                         r.what = "(every case of this row)";
                         r.detail = "the uninterrupted reference run failed";
                         record(r);
                         return;
                       }
                       record(body());
                     }});
  };
  for (const auto& p : planned) {
    if (!wanted(p.row.name())) continue;
    add_case(p.row, [&c, p] { return interruption(c, p.row, p.signal, p.step); });
  }
  const Row distributed{"distributed", 1, false};
  const Row zero2{"zero2", 2, false};
  const Row zero1{"zero1", 1, false};
  const Row one{"default", 1, false};
  const int64_t collective_step = static_cast<int64_t>(1 + rng() % (kSteps - 1));
  const int64_t hang_step = static_cast<int64_t>(1 + rng() % (kSteps - 1));
  // (rows added after these draws were fixed draw theirs now, leaving the others' as they were)
  const size_t first_late = planned.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (drawn_last(rows[i])) plan(i);
  }
  for (size_t k = first_late; k < planned.size(); ++k) {
    const Planned p = planned[k];
    if (!wanted(p.row.name())) continue;
    add_case(p.row, [&c, p] { return interruption(c, p.row, p.signal, p.step); });
  }
  // (the cases on 2 ranks need Gloo, which a build against a LibTorch wheel lacks)
  if (MLO_WITH_GLOO && (wanted("mid-collective") || wanted(zero2.name()))) {
    add_case(zero2, [&c, zero2, collective_step] {
      return killed_mid_collective(c, zero2, collective_step);
    });
  }
  if (MLO_WITH_GLOO && (wanted("hang") || wanted(distributed.name()))) {
    add_case(distributed,
             [&c, distributed, hang_step] { return hanging_rank(c, distributed, hang_step); });
  }
  if (wanted("disk") || wanted(one.name())) {
    add_case(one, [&c, one] { return full_disk(c, one); });
  }
  if (MLO_WITH_GLOO && (wanted("disk") || wanted(zero1.name()))) {
    add_case(zero1, [&c, zero1] { return full_disk(c, zero1); });
  }
  if (wanted("damaged") || wanted(one.name())) {
    add_case(one, [&c, one] {
      return damaged_state(c, one, "truncated", "state.pt", 6, truncate_half);
    });
    add_case(one, [&c, one] {
      return damaged_state(c, one, "corrupted", "state.pt", 6, corrupt_middle);
    });
  }
  if (MLO_WITH_GLOO && (wanted("damaged") || wanted(zero1.name()))) {
    add_case(zero1, [&c, zero1] {
      return damaged_state(c, zero1, "corrupted", "state.rank1.pt", 6, corrupt_middle);
    });
  }
  // Launches first: they are the longest, and the single processes fill in around them.
  std::stable_sort(references.begin(), references.end(),
                   [](const Task& a, const Task& b) { return a.cores > b.cores; });
  std::stable_sort(cases.begin(), cases.end(),
                   [](const Task& a, const Task& b) { return a.cores > b.cores; });
  run_tasks(references, jobs);
  run_tasks(cases, jobs);

  // The table: one line per row of the matrix and per kind of extra case.
  struct Counts {
    int cases = 0, identical = 0, refused = 0, other = 0, skipped = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Counts> table;
  for (const Row& row : rows) order.push_back(row.name());
  for (const std::string g : {"rank killed mid-collective", "rank hangs (SIGSTOP)",
                              "disk full while saving", "damaged state file"}) {
    order.push_back(g);
  }
  Counts total;
  for (const auto& r : results) {
    Counts& t = table[r.group];
    for (Counts* x : {&t, &total}) {
      ++x->cases;
      if (r.outcome == Outcome::kIdentical) ++x->identical;
      if (r.outcome == Outcome::kRefused) ++x->refused;
      if (r.outcome == Outcome::kElse) ++x->other;
      if (r.outcome == Outcome::kSkipped) ++x->skipped;
    }
  }
  std::printf(
      "\nFault-injection matrix (seed %u): every interruption, resumed and compared with "
      "the uninterrupted run\n\n",
      seed);
  std::vector<Result> sorted = results;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Result& a, const Result& b) {
    const auto ia = std::find(order.begin(), order.end(), a.group) - order.begin();
    const auto ib = std::find(order.begin(), order.end(), b.group) - order.begin();
    return ia != ib ? ia < ib : a.what < b.what;
  });
  for (const auto& r : sorted) {
    std::printf("  %-34s %-66s %s\n", r.group.c_str(), r.what.c_str(), outcome_name(r.outcome));
  }
  std::printf("\n%-34s %13s %10s %22s %14s\n", "case", "interruptions", "identical",
              "refused (clear error)", "anything else");
  for (const auto& g : order) {
    if (table.count(g) == 0) continue;
    const Counts& t = table[g];
    std::printf("%-34s %13d %10d %22d %14d%s\n", g.c_str(), t.cases, t.identical, t.refused,
                t.other,
                t.skipped > 0 ? ("  (" + std::to_string(t.skipped) + " skipped)").c_str() : "");
  }
  std::printf("%-34s %13d %10d %22d %14d\n", "total", total.cases, total.identical, total.refused,
              total.other);
  const size_t matrix_cases = static_cast<size_t>(std::count_if(
      rows.begin(), rows.end(), [&](const Row& row) { return table.count(row.name()) > 0; }));
  std::printf(
      "\n%zu cases (%zu rows of the matrix, %zu kinds of extra case), %d interruptions; "
      "wall time %.0f s with %d jobs\n",
      table.size(), matrix_cases, table.size() - matrix_cases, total.cases,
      std::chrono::duration<double>(Clock::now() - begin).count(), jobs);
  for (const auto& r : sorted) {
    if (r.outcome == Outcome::kSkipped) {
      std::printf("\nSKIPPED: %s / %s: %s\n", r.group.c_str(), r.what.c_str(), r.detail.c_str());
    }
  }
  for (const auto& r : sorted) {
    if (r.outcome != Outcome::kElse) continue;
    std::printf("\nANYTHING ELSE: %s / %s\n%s\n", r.group.c_str(), r.what.c_str(),
                r.detail.c_str());
  }
  std::printf("\nrefusals:\n");
  for (const auto& r : sorted) {
    if (r.outcome == Outcome::kRefused) {
      std::printf("  %s / %s: %s\n", r.group.c_str(), r.what.c_str(), r.detail.c_str());
    }
  }
  std::fflush(stdout);
  if (!keep && total.other == 0) fs::remove_all(c.work);
  return total.other == 0 ? 0 : 1;
}
