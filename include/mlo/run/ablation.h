#pragma once
/// \file
/// The memory ablation behind `mlo ablate`: one experiment configuration run several times, each
/// time with one memory feature of its main problem turned on (mixed precision, gradient
/// accumulation, activation checkpointing, memory-efficient activations) and then all of them,
/// measuring per meta-iteration the exact tensor peak, the process's resident memory and the
/// time, next to a floor (a lower bound of the peak). Reports: ablation_report.h; the chart:
/// ablation_chart.h.
///
/// ```
/// mlo::run::AblationOptions options;
/// options.iterations(2);
/// auto result = mlo::run::run_ablation("configs/ablation/lt_cifar10_resnet50.yaml", {}, options,
///                                      [](const std::string& line) { spdlog::info("{}", line); });
/// spdlog::info("\n{}", mlo::run::ablation_markdown(result));
/// ```

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace run {

/// One row of the ablation: a name and the `--set` overrides that make it.
struct AblationRow {
  std::string key;                     ///< short id: baseline, precision, accumulation, ...
  std::string name;                    ///< as printed: "+mixed precision (bf16)"
  std::vector<std::string> overrides;  ///< applied after the user's, e.g. "problems.c.precision=bf16"
  std::string note;                    ///< what the feature does here (printed under the table)
  /// Processes the row runs on: 1 in this process; more through the `RankRunner` of
  /// `run_ablation` (data parallel and ZeRO rows, measured per rank).
  int64_t ranks = 1;
};

/// How `run_ablation` runs.
struct AblationOptions {
  /// Measured meta-iterations per row (after one warm-up meta-iteration).
  TORCH_ARG(int64_t, iterations) = 2;
  /// The problem whose memory features are varied ("" = the experiment's default problem).
  TORCH_ARG(std::string, problem) = "";
  /// The key of that problem's batch size (the accumulation row divides it by
  /// `accumulation`, keeping the effective batch).
  TORCH_ARG(std::string, batch_key) = "data.batch_size";
  /// Batch-size keys of the other problems, by problem: the accumulation row sets each to that
  /// problem's baseline batch, so a batch that follows `batch_key` (reweighting's
  /// `meta_batch_size: 0`) keeps its size. Problems not in the experiment are ignored.
  using BatchKeys = std::vector<std::pair<std::string, std::string>>;
  TORCH_ARG(BatchKeys, other_batch_keys) = BatchKeys{{"reweighter", "data.meta_batch_size"}};
  /// Micro-batches per optimizer step in the accumulation row.
  TORCH_ARG(int64_t, accumulation) = 4;
  /// The checkpointing row's budget, as a fraction of the no-checkpoint activation peak.
  TORCH_ARG(double, checkpoint_budget) = 0.3;
  /// Overrides (relative to `problems.<problem>.`) of the memory-efficient-activation row.
  TORCH_ARG(std::vector<std::string>, activation_overrides) =
      std::vector<std::string>{"model.inplace_relu=true"};
  /// Overrides (relative to `problems.<problem>.`) of the in-place finite-difference row: DARTS
  /// steps the weights back instead of restoring a copy (`DartsOptions::exact_restore`).
  TORCH_ARG(std::vector<std::string>, finite_difference_overrides) =
      std::vector<std::string>{"darts.exact_restore=false"};
  /// Ranks of the data-parallel and ZeRO rows (0: leave those rows out).
  TORCH_ARG(int64_t, ranks) = 2;
  /// Keys of the rows to run ("" or empty = all); the baseline always runs (ratios need it).
  TORCH_ARG(std::vector<std::string>, rows) = std::vector<std::string>{};
};

/// What one row measured. Bytes are tensor-storage bytes unless named rss.
struct AblationRowResult {
  AblationRow row;
  int64_t steps_per_iteration = 1;  ///< global steps per meta-iteration (unroll x accumulation)
  int64_t micro_batch = 0;          ///< the problem's batch per forward
  /// Peak per meta-iteration: the model state (parameters and buffers of every problem, alive
  /// before metering) plus the exact meter's highest count during the measured iterations.
  int64_t peak_bytes = 0;
  int64_t state_bytes = 0;     ///< parameters and buffers of every problem
  int64_t rss_peak_bytes = 0;  ///< the process's peak resident set during the row (VmHWM)
  /// CUDA: the caching allocator's highest reserved bytes during the row (what nvidia-smi users
  /// compare, less the CUDA context); there the exact peak is the allocator's allocated peak.
  /// 0 on CPU.
  int64_t reserved_peak_bytes = 0;
  /// rss_peak_bytes minus the resident set before the row's experiment was built.
  int64_t rss_growth_bytes = 0;
  double seconds = 0;  ///< mean wall time per meta-iteration
  /// A lower bound of `peak_bytes`: `persistent_bytes + transient_bytes`, tensors that must be
  /// alive together at one instant of every measured meta-iteration (docs/memory-ablation.md,
  /// "The floor").
  int64_t floor_bytes = 0;
  /// Alive at every instant: parameters and buffers of every problem (`state_bytes`) and the
  /// optimizer states they held after the warm-up.
  int64_t persistent_bytes = 0;
  /// The most further bytes that must coexist at one instant: the largest of the end of a
  /// forward through the varied problem's model with a graph (measured), its gradients at its
  /// backward, and, below an upper problem, the upper's gradients, v and (DARTS) the copy of the
  /// weights and the re-evaluation's forward (measured).
  int64_t transient_bytes = 0;
  /// Which instant gives `transient_bytes`, e.g. "classifier's forward end on reweighter's batch".
  std::string floor_instant;
  std::string plan;                  ///< the checkpointing plan in use, if any (one line)

  double peak_ratio = 0;   ///< peak / baseline peak
  double time_ratio = 0;   ///< seconds / baseline seconds
  double rss_ratio = 0;    ///< rss growth / baseline rss growth
  double over_floor = 0;   ///< peak / floor
  /// Processes the row ran on; above 1 every byte and time figure is the largest of any rank.
  int64_t ranks = 1;
};

/// The whole ablation.
struct AblationResult {
  std::string config_path;
  std::string experiment;        ///< the experiment's name (`name:` in the YAML)
  std::string problem;           ///< the varied problem
  std::string description;       ///< the experiment's own description (data, models)
  bool synthetic = false;        ///< whether the data was synthetic
  std::string device = "cpu";
  int64_t threads = 0;           ///< intra-op threads
  int64_t batch = 0;             ///< the problem's batch in the baseline
  int64_t iterations = 0;        ///< measured meta-iterations per row
  std::vector<std::string> overrides;  ///< the user's `--set`s
  std::vector<AblationRowResult> rows;
  /// Rows not measured, with why (a row that failed: its error).
  std::vector<std::string> missing;

  /// The row with `key`; throws `mlo::Error` if absent.
  const AblationRowResult& row(const std::string& key) const;
};

/// The rows for `problem` with batch `batch`: baseline, precision, accumulation, checkpointing,
/// activations, finite_difference, all (or the baseline and `options.rows()`, each once; only
/// the chosen rows' options are checked). The precision row is bf16 (fp16 where the problem runs on CUDA).
/// `other_batches`: the baseline batch of other problems (for `other_batch_keys`).
std::vector<AblationRow> ablation_rows(
    const std::string& problem, int64_t batch, bool cuda, const AblationOptions& options,
    const std::vector<std::pair<std::string, int64_t>>& other_batches = {});

/// Runs one row on `ranks` processes (the rendezvous variables set for each) with `overrides`
/// (the user's and the row's), each calling `measure_ablation_row`; returns
/// each rank's result. Throws when a rank fails. (`mlo ablate` starts them as `mlo ablate-rank`.)
using RankRunner = std::function<std::vector<AblationRowResult>(
    const std::vector<std::string>& overrides, int64_t ranks)>;

/// Loads `config_path` with `overrides` (as `mlo run --set`), then runs every row: builds the
/// experiment, runs one warm-up meta-iteration and `options.iterations()` measured ones, and
/// computes the floor. Rows on several ranks run through `ranks` (without one they are listed as
/// not measured). Calls `progress` with one line per row. Throws `mlo::Error` for a bad
/// configuration or option or a failed baseline; a later row that fails is listed in
/// `missing` with its error.
AblationResult run_ablation(const std::string& config_path,
                            const std::vector<std::string>& overrides,
                            const AblationOptions& options,
                            const std::function<void(const std::string&)>& progress = {},
                            const RankRunner& ranks = {});

/// One row's measurement in this process: `config_path` with `overrides` (the row's included),
/// `iterations` measured meta-iterations of `problem` ("": the experiment's default problem) after
/// a warm-up one. Under a distributed
/// strategy this process is one rank (the rendezvous variables say which) and measures itself.
AblationRowResult measure_ablation_row(const std::string& config_path,
                                       const std::vector<std::string>& overrides,
                                       const std::string& problem, int64_t iterations);

}  // namespace run
}  // namespace mlo
