#pragma once
// Part of the command line (src/cli): `mlo run` on one configuration: builds the experiment,
// then runs its engine as a run folder (mlo::Run, io/run.h: the same code any program uses).

#include "fault.h"

#include <mlo/io/run.h>
#include <mlo/run/config.h>

namespace mlo {
namespace cli {

/// Runs `config` as `mlo run` does, with what the command line asked in `command`: its folder
/// (`dir`; "" = runs/<config name>), resume, overwrite, stop_at, progress, log_all_ranks and
/// command line (`save_step` and `tensorboard` come from the configuration's `engine:` keys).
/// `raise_at` injects a fault for tests (fault.h). Throws `mlo::Error` for bad input.
///
/// Under a distributed `engine.strategy` (one process per rank: `mlo launch`, torchrun) only
/// rank 0 writes the output folder (config, log, metrics, results), validates, evaluates on the
/// test set and prints the report; the state is saved as `mlo::Run` says (io/run.h). On the
/// other ranks the result holds the steps and `interrupted` only.
RunResult run_experiment(const run::RunConfig& config, const RunOptions& command,
                         const RaiseAt& raise_at = {});

}  // namespace cli
}  // namespace mlo
