#pragma once
// Part of the mlo tool (tools/): `mlo launch --nproc N [--master-port P] [--master-addr A]
// [--max-restarts R] CONFIG [mlo run args...]`, a local launcher in the manner of torchrun: it
// starts N copies of this program's `run` subcommand with RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT and MLO_RESTART_COUNT set, prefixes each line of each rank's output
// with "[rank r] ", forwards SIGINT and SIGTERM to every rank, and returns the worst exit code
// (of the last attempt). When one rank fails, or after it forwarded a signal, the ranks get a
// grace period (engine.timeout_s, or --grace) to exit on their own; any still running then is
// killed (SIGKILL, which also ends a stopped rank) and the attempt fails; after a failure (not
// a signal) it starts them all again, at most R times.

#include <mlo/cli/main.h>

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mlo {
namespace cli {

/// What `mlo launch` starts.
struct LaunchOptions {
  /// Number of ranks (processes), >= 1.
  int nproc = 1;
  /// Port of rank 0's store (0: a free port on this machine).
  int master_port = 0;
  std::string master_addr = "127.0.0.1";
  /// The experiment YAML and the `mlo run` arguments after it (--set, --out, --resume, ...),
  /// read by `launch` with the same definitions as the ranks' subcommand reads them.
  std::string config;
  std::vector<std::string> run_args;
  /// After a rank fails on its own, the ranks are stopped and all started again, at most this
  /// many times, with MLO_RESTART_COUNT set to the restart's number (1, 2, ...): each continues
  /// from the run's last saved state (mlo::Run). A forwarded signal is never followed by one.
  int max_restarts = 0;
  /// Seconds the ranks get to exit on their own after one failed or after the first forwarded
  /// signal, before the launcher kills them (< 0: the config's engine.timeout_s, with its --set
  /// overrides).
  double grace_s = -1;
  /// The program whose `subcommand` each rank runs ("": this one, /proc/self/exe).
  std::string program;
  /// What each rank runs: `program subcommand config run_args...` (`mlo ablate` starts its
  /// per-rank rows as "ablate-rank").
  std::string subcommand = "run";
};

/// Starts the ranks and supervises them until all have exited; returns the worst exit code (a
/// rank killed by signal s counts as 128 + s). Throws `mlo::Error` for bad options, a bad
/// config, or arguments the ranks' subcommand would refuse (before any rank starts).
int launch(const LaunchOptions& options);

/// The `launch` subcommand: `run()` launches the ranks and returns the exit status.
class LaunchCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override;
  int run() override;

 private:
  CLI::App* command_ = nullptr;
  LaunchOptions options_;
  std::vector<std::string> device_;  // `--device D` before CONFIG, as "device=D"
};

}  // namespace cli
}  // namespace mlo
