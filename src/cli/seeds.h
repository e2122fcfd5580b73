#pragma once
// Part of the command line (src/cli): multi-seed runs (`mlo run CONFIG --seeds 0-4`) and their
// summary, and the paired comparison of two such runs (`mlo compare RUN_A RUN_B`).

#include "runner.h"

#include <mlo/run/config.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlo {
namespace cli {

/// The metrics a summary lists first, when the runs have them: a classifier's test metrics
/// (the numbers to report) and its final validation metrics (the numbers to choose by).
const std::vector<std::string>& summary_metrics();

/// The metrics of `results` in a summary's order: `summary_metrics()` first, then every other
/// one by name; with `per_class` false, none with a per-class part ("test/acc/<class>").
std::vector<std::string> summary_order(
    const std::map<std::string, std::map<int64_t, double>>& results, bool per_class);

/// The seed a `--seeds` run folder is named for: `seed_<s>` with `s` in plain digits (no
/// leading zero, so "seed_03" cannot collide with "seed_3"); -1 for any other name.
int64_t seed_of_folder(const std::string& name);

/// A run's results.json, read: its seed, experiment and metrics.
struct ResultsFile {
  int64_t seed = 0;
  std::string path;
  bool single = false;     ///< `dir` is one run's folder (its results.json), not a `--seeds` one
  std::string experiment;  ///< its "experiment" ("" where it names none)
  /// "test/<name>" and "valid/<name>" -> value; a diverged metric ("NaN", "Infinity") as that
  /// value, never dropped.
  std::map<std::string, double> metrics;
};

/// The results of `dir`: its own results.json when it is one run's folder (the seed its "meta"
/// records, 0 where none), else every `seed_<s>/results.json` under it, by seed (only the seeds
/// in `only`, when given). Throws `mlo::Error` if `dir` is not a folder, or naming a file that
/// is not results.json as mlo writes it.
std::vector<ResultsFile> results_files(const std::string& dir,
                                       const std::vector<int64_t>& only = {});

/// metric ("test/balanced_acc", "valid/balanced_acc", ...) -> seed -> value, read from every
/// file of `results_files(dir, only)`. A diverged run's
/// metric (written as "NaN" or "Infinity") is read as that value, never dropped, so a summary
/// over it says nan. Throws `mlo::Error` if there is none.
std::map<std::string, std::map<int64_t, double>> read_seed_results(
    const std::string& dir, const std::vector<int64_t>& only = {});

/// Writes `<dir>/summary.json`, `summary.csv` (n, mean, std and standard error of every test
/// and validation metric over the seeds, or over `only` when given) and `summary.md` (the same
/// without the per-class metrics), in `summary_order`, and returns the Markdown table.
std::string write_summary(const std::string& dir, const std::vector<int64_t>& only = {});

/// Runs `config` once per seed, one after the other, into `<out>/seed_<s>` (out: the option's
/// folder or runs/<name>), then writes the summary. With `options.resume`, a seed whose
/// results.json exists is kept and not run again; a seed that is run again starts by removing
/// its old results.json. The summary covers exactly `seeds`. Returns the folder; `interrupted`
/// (when given) tells whether a signal stopped the runs; a run stopped by `--stop-at` ends the
/// loop too, but is not an interruption (in both cases the summary is not written).
std::string run_seeds(const run::RunConfig& config, const RunOptions& options,
                      const std::vector<int64_t>& seeds, bool* interrupted = nullptr,
                      const RaiseAt& raise_at = {});

/// The paired per-seed differences B - A of `metrics` (default: the test metrics), with their
/// mean, standard error and mean / se; returns the text (Markdown tables). A and B are folders
/// of `--seeds` runs or single runs' folders (two single runs are paired whatever their seeds).
/// Throws `mlo::Error` when their results.json name different experiments.
std::string compare_runs(const std::string& a, const std::string& b,
                         std::vector<std::string> metrics = {});

}  // namespace cli
}  // namespace mlo
