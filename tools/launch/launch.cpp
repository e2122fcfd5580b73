#include "launch.h"

#include "ablate/ablate.h"
#include "cli/run_arguments.h"

#include <mlo/base/error.h>
#include <mlo/run/sharding.h>
#include <mlo/run/yaml.h>
#include <mlo/run/config.h>

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace mlo {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_signal = 0;  // the latest SIGINT/SIGTERM to forward (0: none)

extern "C" void on_signal(int sig) { g_signal = sig; }

// A port that was free on `address` a moment ago (the OS picks it).
int free_port(const std::string& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  MLO_CHECK(fd >= 0,
            "mlo launch: cannot open a socket to find a free port: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = INADDR_ANY;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  MLO_CHECK(ok, "mlo launch: no free port on ", address, "; give one with --master-port");
  return ntohs(addr.sin_port);
}

// Error lines ("mlo: error: ...") by text -> the ranks that printed them, in order.
using ErrorLines = std::map<std::string, std::vector<int>>;

// One output stream of one rank: a pipe read line by line, each line written to `sink` with
// the rank's prefix (partial lines wait for their end, or for the pipe's end). An error line
// another rank printed already is not printed again (`errors`; the launcher names the ranks).
struct Channel {
  int fd = -1;
  FILE* sink = nullptr;
  std::string prefix;
  std::string pending;
  int rank = 0;
  ErrorLines* errors = nullptr;

  void emit(const std::string& line) const {
    if (errors != nullptr && line.rfind("mlo: error: ", 0) == 0) {
      std::vector<int>& ranks = (*errors)[line];
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
      if (ranks.front() != rank) return;
    }
    std::fwrite(prefix.data(), 1, prefix.size(), sink);
    std::fwrite(line.data(), 1, line.size(), sink);
    std::fputc('\n', sink);
    std::fflush(sink);
  }
  // Reads what is there; returns false at the end of the stream (then closed).
  bool drain() {
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!pending.empty()) emit(pending);
      pending.clear();
      ::close(fd);
      fd = -1;
      return false;
    }
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
      emit(pending.substr(0, end));
      pending.erase(0, end + 1);
    }
    return true;
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = true;
  bool killed = false;  // by the launcher, after the grace period
  int code = 0;         // exit code, 128 + signal when killed
  std::string how;
};

// Starts `argv` as rank `rank` with its stdout and stderr on new pipes.
Rank spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int rank,
           std::vector<Channel>& channels, ErrorLines& errors) {
  int out[2], err[2];
  MLO_CHECK(::pipe(out) == 0 && ::pipe(err) == 0, "mlo launch: pipe: ", std::strerror(errno));
  // Everything is prepared before fork: the child only redirects and execs.
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  MLO_CHECK(pid >= 0, "mlo launch: fork: ", std::strerror(errno));
  if (pid == 0) {
    // NOTE: its own process group, so that a Ctrl-C on the terminal reaches the launcher only,
    // which forwards it once (a second one would stop a rank at once, unsaved); and a TERM when
    // the launcher dies, so that no rank outlives it.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(129);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::close(err[0]);
    ::close(err[1]);
    ::execve(args[0], args.data(), envp.data());
    std::fprintf(stderr, "mlo launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  channels.push_back(Channel{out[0], stdout, prefix, {}, rank, &errors});
  channels.push_back(Channel{err[0], stderr, prefix, {}, rank, &errors});
  Rank r;
  r.pid = pid;
  return r;
}

// The environment of rank `rank` in attempt `restart` (0: the first): ours, with the torchrun
// variables set, and MLO_RESTART_COUNT.
std::vector<std::string> rank_env(const LaunchOptions& o, int port, int rank, int restart) {
  const std::vector<std::pair<std::string, std::string>> set{
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(o.nproc)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"MASTER_ADDR", o.master_addr},       {"MASTER_PORT", std::to_string(port)},
      {"MLO_RESTART_COUNT", std::to_string(restart)}};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : set) replaced = replaced || key == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  return env;
}

// The configuration the ranks will run. Their command line `subcommand config run_args...` is
// read with the very definitions their subcommand parses it with (mlo run's, or mlo ablate's
// per-rank rows'), so the overrides are theirs (several values per --set included), and
// arguments they would refuse fail here, once, before any rank starts.
run::RunConfig rank_config(const LaunchOptions& o) {
  CLI::App app;
  RunArguments run;
  add_run_command(app, run);
  AblateRankCommand ablate_rank;
  ablate_rank.add_to(app);
  MLO_CHECK(o.subcommand == "run" || o.subcommand == "ablate-rank",
            "mlo launch: cannot start ranks of subcommand '", o.subcommand,
            "' (run or ablate-rank)");
  std::vector<std::string> args{o.subcommand, o.config};
  args.insert(args.end(), o.run_args.begin(), o.run_args.end());
  std::reverse(args.begin(), args.end());  // CLI11 takes the last argument first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    throw Error("mlo launch: the arguments after CONFIG are not valid for mlo " + o.subcommand +
                ": " + e.what());
  }
  return run::load_run_config(o.config,
                             ablate_rank.command->parsed() ? ablate_rank.overrides : run.overrides);
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// What one attempt of the ranks came to.
struct Attempt {
  int worst = 0;      // the worst exit code
  bool failed = false;  // a rank failed on its own (not after a forwarded signal)
  bool signaled = false;  // the launcher forwarded a signal
  bool all_refused = false;  // every rank exited with code 2 on its own
};

// Starts the ranks of attempt `restart` and supervises them until all have exited.
Attempt run_attempt(const LaunchOptions& o, const std::vector<std::string>& argv, int port,
                    int restart, double grace, const char* grace_from) {
  std::fprintf(stderr, "mlo launch: %d rank(s), MASTER_ADDR=%s MASTER_PORT=%d\n", o.nproc,
               o.master_addr.c_str(), port);
  std::vector<Channel> channels;
  std::vector<Rank> ranks;
  ErrorLines errors;
  for (int r = 0; r < o.nproc; ++r) {
    ranks.push_back(spawn(argv, rank_env(o, port, r, restart), r, channels, errors));
  }

  int first_failed = -1;
  int forwarded = 0;  // the first signal forwarded; after it, ranks exiting non-zero are no failure
  // NOTE: the grace period starts at the first failure or the first forwarded signal, whichever
  // comes first; any rank still running when it ends is killed (SIGKILL also ends a stopped
  // one), so a hanging rank cannot keep the launcher waiting forever.
  Clock::time_point kill_at = Clock::time_point::max();
  const auto grace_from_now = [grace] {
    return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace * 1000));
  };
  int running = o.nproc;
  while (running > 0 || !channels.empty()) {
    if (g_signal != 0) {
      const int sig = g_signal;
      g_signal = 0;
      if (forwarded == 0 && running > 0) {
        forwarded = sig;
        kill_at = std::min(kill_at, grace_from_now());
        std::fprintf(stderr,
                     "mlo launch: forwarding signal %d to the ranks; they have %.0f s (%s) to "
                     "stop\n",
                     sig, grace, grace_from);
      } else {
        std::fprintf(stderr, "mlo launch: forwarding signal %d to the ranks\n", sig);
      }
      for (const auto& r : ranks) {
        if (r.running) ::kill(r.pid, sig);
      }
    }
    std::vector<pollfd> fds;
    for (const auto& c : channels) fds.push_back(pollfd{c.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    std::vector<Channel> open;
    for (size_t i = 0; i < channels.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0 || channels[i].drain()) {
        open.push_back(std::move(channels[i]));
      }
    }
    channels = std::move(open);

    // The ranks that ended since the last look. NOTE: of several, the one killed by a signal is
    // named as the first failure: its peers' errors are usually the consequence.
    std::vector<size_t> ended;
    for (size_t r = 0; r < ranks.size(); ++r) {
      Rank& rank = ranks[r];
      int status = 0;
      if (!rank.running || ::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.running = false;
      --running;
      rank.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      rank.how = describe(status);
      if (rank.code != 0) ended.push_back(r);
    }
    std::stable_sort(ended.begin(), ended.end(), [&](size_t a, size_t b) {
      return ranks[a].code > 128 && ranks[b].code <= 128;
    });
    for (size_t r : ended) {
      if (first_failed < 0 && forwarded == 0 && !ranks[r].killed) {
        first_failed = static_cast<int>(r);
        if (running > 0) {
          kill_at = grace_from_now();
          std::fprintf(stderr,
                       "mlo launch: rank %zu %s; the other ranks have %.0f s (%s) to stop on "
                       "their own\n",
                       r, ranks[r].how.c_str(), grace, grace_from);
          continue;
        }
      }
      std::fprintf(stderr, "mlo launch: rank %zu %s\n", r, ranks[r].how.c_str());
    }
    if (running > 0 && Clock::now() >= kill_at) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (!ranks[r].running || ranks[r].killed) continue;
        if (first_failed >= 0) {
          std::fprintf(stderr,
                       "mlo launch: rank %zu still runs %.0f s after rank %d failed; killing it\n",
                       r, grace, first_failed);
        } else {
          std::fprintf(stderr,
                       "mlo launch: rank %zu still runs %.0f s after signal %d was forwarded; "
                       "killing it\n",
                       r, grace, forwarded);
        }
        ::kill(ranks[r].pid, SIGKILL);
        ranks[r].killed = true;
      }
      kill_at = Clock::time_point::max();
    }
  }

  for (auto& [line, from] : errors) {
    if (from.size() < 2) continue;
    std::sort(from.begin() + 1, from.end());
    std::string others;  // "1-3, 5": runs of consecutive ranks
    for (size_t i = 1; i < from.size(); ++i) {
      size_t j = i;
      while (j + 1 < from.size() && from[j + 1] == from[j] + 1) ++j;
      others += (others.empty() ? "" : ", ") + std::to_string(from[i]) +
                (j > i ? "-" + std::to_string(from[j]) : std::string());
      i = j;
    }
    std::fprintf(stderr, "mlo launch: rank%s %s printed the same error as rank %d (above)\n",
                 from.size() > 2 ? "s" : "", others.c_str(), from[0]);
  }
  int worst = 0;
  for (const auto& r : ranks) worst = std::max(worst, r.code);
  std::string killed;
  int num_killed = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].killed) continue;
    killed += (killed.empty() ? "" : ", ") + std::to_string(r);
    ++num_killed;
  }
  if (first_failed >= 0) {
    std::fprintf(stderr, "mlo launch: failed: rank %d failed first (exit status %d)\n",
                 first_failed, ranks[first_failed].code);
  } else if (!killed.empty()) {
    std::fprintf(stderr,
                 "mlo launch: failed: %s %s did not stop within %.0f s of signal %d and %s "
                 "killed (exit status %d)\n",
                 num_killed > 1 ? "ranks" : "rank", killed.c_str(), grace, forwarded,
                 num_killed > 1 ? "were" : "was", worst);
  } else if (worst != 0) {
    std::fprintf(stderr, "mlo launch: the ranks exited with status %d\n", worst);
  }
  Attempt out;
  out.worst = worst;
  out.failed = first_failed >= 0;
  // (every rank refused on its own, none killed: an error each would repeat; a peer's timeout
  // after another rank hung or died is not, as that rank exits otherwise or is killed)
  out.all_refused = std::all_of(ranks.begin(), ranks.end(),
                                [](const Rank& r) { return r.code == 2 && !r.killed; });
  out.signaled = forwarded != 0;
  return out;
}

}  // namespace

int launch(const LaunchOptions& options) {
  LaunchOptions o = options;
  MLO_CHECK(o.nproc >= 1, "mlo launch: --nproc must be >= 1, got ", o.nproc);
  MLO_CHECK(o.max_restarts >= 0 && o.max_restarts <= 1000,
            "mlo launch: --max-restarts must be in [0, 1000], got ", o.max_restarts);
  MLO_CHECK(o.master_port >= 0 && o.master_port <= 65535,
            "mlo launch: --master-port must be in [0, 65535], got ", o.master_port);
  // Read here too, so that a bad config or strategy fails once, before any rank starts.
  const run::RunConfig config = rank_config(o);
  MLO_CHECK(o.nproc == 1 || config.engine.strategy() != dist::Strategy::kDefault,
            "mlo launch: --nproc ", o.nproc, " but engine.strategy is default (",
            config.where("engine.strategy"),
            "); set engine.strategy to distributed, zero1, zero2 or zero3 (e.g. --set "
            "engine.strategy=distributed)");
  run::check_world_size(config, o.nproc);
  const double grace = o.grace_s >= 0 ? o.grace_s : config.engine.timeout_s();
  const char* grace_from = o.grace_s >= 0 ? "--grace" : "engine.timeout_s";
  if (o.program.empty()) {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    MLO_CHECK(n > 0, "mlo launch: cannot find this program (/proc/self/exe)");
    o.program.assign(self, static_cast<size_t>(n));
  }
  std::vector<std::string> argv{o.program, o.subcommand, o.config};
  argv.insert(argv.end(), o.run_args.begin(), o.run_args.end());

  struct sigaction action {};
  action.sa_handler = on_signal;  // no SA_RESTART: poll returns at once
  sigemptyset(&action.sa_mask);
  struct sigaction previous_int {};
  struct sigaction previous_term {};
  ::sigaction(SIGINT, &action, &previous_int);
  ::sigaction(SIGTERM, &action, &previous_term);
  g_signal = 0;

  // A restart (after a rank failed on its own) starts every rank again, with MLO_RESTART_COUNT
  // set to its number: each continues from the run's last saved state (mlo::Run). A signal the
  // launcher forwarded ends the launch instead.
  Attempt attempt;
  for (int restart = 0;; ++restart) {
    const int port = o.master_port > 0 ? o.master_port : free_port(o.master_addr);
    attempt = run_attempt(o, argv, port, restart, grace, grace_from);
    if (!attempt.failed || attempt.signaled || g_signal != 0 || restart >= o.max_restarts) break;
    if (attempt.all_refused) {
      std::fprintf(stderr,
                   "mlo launch: no restart: every rank exited with code 2 on its own (an error "
                   "in the configuration or the input, which every restart would repeat)\n");
      break;
    }
    std::fprintf(stderr, "mlo launch: restarting the ranks (restart %d of at most %d)\n",
                 restart + 1, o.max_restarts);
  }
  ::sigaction(SIGINT, &previous_int, nullptr);
  ::sigaction(SIGTERM, &previous_term, nullptr);
  return attempt.worst;
}

CLI::App* LaunchCommand::add_to(CLI::App& app) {
  command_ = app.add_subcommand(
      "launch",
      "Run an experiment on N local ranks (data parallel; engine.strategy must not be default)");
  command_->add_option("--nproc", options_.nproc, "number of ranks (processes)")->required();
  command_->add_option("--master-port", options_.master_port,
                       "port of rank 0's store (default: a free port)");
  command_->add_option("--master-addr", options_.master_addr,
                       "address of rank 0's store (default 127.0.0.1)");
  command_->add_option("--max-restarts", options_.max_restarts,
                       "after a rank fails, start every rank again, at most this many times; "
                       "each restart continues from the run's last saved state; every rank "
                       "exiting with status 2 (a configuration error) is final (default 0)");
  command_->add_option("--grace", options_.grace_s,
                       "seconds the ranks get to exit after one fails or a signal is forwarded, "
                       "before they are killed, 0 to 86400 (default engine.timeout_s)")
      ->check([](const std::string& text) {
        double seconds = -1;
        size_t used = 0;
        try {
          seconds = std::stod(text, &used);
        } catch (const std::exception&) {
        }
        return used == text.size() && seconds >= 0 && seconds <= 86400
                   ? std::string()
                   : "must be seconds in [0, 86400], got '" + text + "'";
      });
  // Before CONFIG; after it, `mlo run`'s own --device does the same.
  add_device_option(*command_, device_);
  // NOTE: CONFIG and everything after it go to `mlo run` as they are (--set, --out, --resume,
  // ...); `launch` reads them with mlo run's own definitions (rank_config).
  command_->prefix_command();
  command_->footer("Usage: mlo launch --nproc N [--master-port P] CONFIG [mlo run options...]");
  return command_;
}

int LaunchCommand::run() {
  std::vector<std::string> rest = command_->remaining();
  MLO_CHECK(!rest.empty() && rest.front().rfind("-", 0) != 0,
            "mlo launch: give the experiment YAML after the launch options: mlo launch --nproc N "
            "CONFIG [mlo run options...]",
            rest.empty() ? std::string() : "; got '" + rest.front() + "'");
  options_.config = rest.front();
  options_.run_args.clear();
  for (const auto& device : device_) {
    options_.run_args.insert(options_.run_args.end(), {"--set", device});
  }
  options_.run_args.insert(options_.run_args.end(), rest.begin() + 1, rest.end());
  return launch(options_);
}

}  // namespace cli
}  // namespace mlo
