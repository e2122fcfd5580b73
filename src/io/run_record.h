#pragma once
// Part of src/io (internal): what a run (io/run.h) writes into its folder about itself besides
// its state and metrics. config.yaml: the configuration it started with, written once; a run
// resumed with another one keeps it and writes the new one beside it. results.json: its results
// and metadata, written when it ends; reading it back tells a finished run from one to go on.
#include "run_metadata.h"

#include <mlo/core/metrics.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlo {
namespace io {

/// What results.json holds.
struct RunResults {
  std::string experiment;  ///< the run's name (`Run::name`)
  RunMetadata meta;
  int64_t steps = 0;           ///< global steps taken
  int64_t evaluated_step = 0;  ///< the step whose parameters were evaluated
  bool stopped_early = false;
  bool synthetic = false;  ///< trained on synthetic data
  Metrics test;            ///< the final evaluation's metrics
  Metrics valid;           ///< the final validation's metrics
};

/// The results.json in `dir` if it says the run is finished: it took `train_iters` steps or
/// more, or stopped early. Nothing when there is none or the run may go on; `mlo::Error` naming
/// the file when it cannot be read as mlo writes it. (`experiment`, `meta` and `synthetic` are
/// not read back.)
std::optional<RunResults> finished_results(const std::string& dir, int64_t train_iters);

/// The keys whose values differ between two configurations as a run records them (YAML),
/// "data.noise (0.1 -> 0.3), ...", counting only those that change what the run's steps
/// compute: not `name`, `seed` (checked on its own), `threads`, `device`, the engine's
/// `train_iters`, `valid_step`, `log_step`, `track_memory`, `timeout_s`, `save_step`,
/// `tensorboard`, `backend`, `cudnn_benchmark`, nor a problem's `log_step`, nor a key only one
/// of them has (another version's writer), and a number written in another form is the same
/// number. "" when none does.
std::string arithmetic_changes(const std::string& before, const std::string& after);

/// The configurations recorded in `dir` (config.yaml and each config.resumed*.yaml), in no
/// particular order; none when it has none.
std::vector<std::string> recorded_configs(const std::string& dir);

/// Writes `results` into `dir`/results.json (atomically; NaN and the infinities as strings).
void write_results(const std::string& dir, const RunResults& results);

/// Records `resolved`, the configuration a run starts with, in `dir`/config.yaml. A resumed run
/// whose record differs (and `same` does not call the two the same; it may be empty) keeps the
/// record as it is and writes `resolved` to config.resumed.yaml, or, when that holds another
/// configuration already, to config.resumed.step<start>[-i].yaml; it warns naming both files
/// and each key whose value differs.
void record_config(const std::string& dir, const std::string& resolved, bool resume, int64_t start,
                   const std::function<bool(const std::string&)>& same);

}  // namespace io
}  // namespace mlo
