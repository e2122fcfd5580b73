#pragma once
// Part of the mlo tool (src/cli): `mlo run` on one configuration: builds the experiment, then
// runs its engine as a run folder (mlo::Run, io/run.h: the same code any program uses).

#include "fault.h"

#include <mlo/core/metrics.h>
#include <mlo/run/config.h>

#include <optional>
#include <string>
#include <vector>

namespace mlo {
namespace cli {

/// What `mlo run` was asked, besides the configuration.
struct RunCommand {
  /// Output folder ("" = runs/<config name>).
  std::string out_dir;
  /// Continue from the run saved in the folder.
  bool resume = false;
  /// Replace a run in the folder (its files are moved aside first).
  bool overwrite = false;
  /// Save the state and stop after this global step, as Ctrl-C does (0: run to the end). Inside
  /// a distributed run's accumulation window both wait for the window's end (a state saved
  /// inside one could not be resumed).
  int64_t stop_at = 0;
  /// Progress bar on a terminal; nullopt = when standard error is a terminal.
  std::optional<bool> progress;
  /// Under a launch, ranks other than 0 log at info too (else warnings and errors only).
  bool log_all_ranks = false;
  /// Fault injection for tests: raise a signal on this process at the end of a step (fault.h).
  RaiseAt raise_at;
  /// The command line that started the run, recorded in its metadata (results.json "meta").
  std::vector<std::string> command_line;
};

struct RunResult {
  Metrics test;              ///< final test metrics (empty when interrupted)
  Metrics valid;             ///< final validation metrics, "valid/..." (empty when interrupted)
  int64_t steps = 0;         ///< global steps done
  bool interrupted = false;  ///< stopped by Ctrl-C or `stop_at` (state saved)
  /// The global step whose parameters the final metrics are of: the best validation's under
  /// `engine.early_stopping.restore_best`, else `steps`.
  int64_t evaluated_step = 0;
  std::string out_dir;
};

/// Runs `config` as `mlo run` does. Throws `mlo::Error` for bad input.
///
/// Under a distributed `engine.strategy` (one process per rank: `mlo launch`, torchrun) only
/// rank 0 writes the output folder (config, log, metrics, results), validates, evaluates on the
/// test set and prints the report; the state is saved as `mlo::Run` says (io/run.h).
/// On the other ranks the result holds the steps and `interrupted` only.
RunResult run_experiment(const run::RunConfig& config, const RunCommand& command);

}  // namespace cli
}  // namespace mlo
