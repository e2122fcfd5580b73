#pragma once
// Part of the mlo tool (src/cli): learning curves read back from runs' metrics.csv, for
// `mlo plot`. A curve is one metric of one run against the global step; a `--seeds` folder
// (seed_<s>/metrics.csv) gives the mean over its seeds with a band (min to max, or +-1 std).
// Metrics are named as TensorBoard tags (io::tensorboard_tag): "classifier/loss", "valid/acc".
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlo {
namespace cli {

/// Every value of one run: tag -> step -> value.
using RunMetrics = std::map<std::string, std::map<int64_t, double>>;

/// The values of `<folder>/metrics.csv`. Throws `mlo::Error` naming the file and line for a
/// file that cannot be read or a malformed line.
RunMetrics read_run_metrics(const std::string& folder);

/// A run as drawn: one folder, one or several seeds.
struct RunCurves {
  std::string label;               ///< the legend's name: the folder's name
  std::string folder;
  std::vector<RunMetrics> seeds;   ///< one entry for a plain run
  std::vector<std::string> seed_names;  ///< "seed_3", ... ("" for a plain run)
};

/// A run folder (with metrics.csv) or a `--seeds` folder (with seed_<s>/metrics.csv). Throws
/// `mlo::Error` when it is neither.
RunCurves load_run_curves(const std::string& folder);

/// What `mlo plot` draws when no --metric is given: each problem's training loss
/// ("<problem>/loss") and each validation metric without a per-class part ("valid/acc",
/// "valid/balanced_acc", "valid/loss", ...), in that order, as found in any seed of any run.
std::vector<std::string> default_metrics(const std::vector<RunCurves>& runs);

enum class Band { kMinMax, kStd };

/// One metric of one run, over the steps every seed that logged it logged it at.
struct Curve {
  int seeds = 0;                       ///< the seeds it is over
  std::vector<std::string> missing;    ///< the seeds of the run that never logged the metric
  std::vector<int64_t> steps;
  std::vector<double> mean;  ///< the value, for one seed
  std::vector<double> low;   ///< min over seeds, or mean - std (sample std); = mean for one seed
  std::vector<double> high;  ///< max over seeds, or mean + std
};

/// The curve of `metric` in `run`, over the seeds that logged it (a seed still running, or one
/// without that metric, is left out and named in `missing`); empty when none did. Steps that
/// some of those seeds lack are left out (the band is over the same seeds at every step).
Curve make_curve(const RunCurves& run, const std::string& metric, Band band);

}  // namespace cli
}  // namespace mlo
