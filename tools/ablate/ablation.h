#pragma once
/// \file
/// The memory ablation behind `mlo ablate`: one experiment configuration run several times, each
/// time with one memory feature turned on where it changes the peak (mixed precision and
/// gradient accumulation on every level, activation checkpointing, memory-efficient activations
/// and in-place finite differences on the main problem's model) and then all of them. Each row
/// is measured alone (the exact tensor peak per meta-iteration, the process's resident memory,
/// a floor: a lower bound of the peak, and each level's parameter footprint); then every row's
/// time is measured in interleaved rounds, so that machine noise hits all rows alike, and the
/// time ratios come with their spread over the rounds. Reports: ablation_report.h.
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
#include <optional>
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
  std::vector<std::string> levels;     ///< the problems whose configuration the row changes
  /// Processes the row runs on: 1 in this process; more through the `RankRunner` of
  /// `run_ablation` (data parallel and ZeRO rows, measured per rank).
  int64_t ranks = 1;
  /// Why the row cannot run in this experiment ("the experiment names no batch-size key"), or
  /// "": a row that cannot run is listed as left out, with this reason.
  std::string unavailable{};
};

/// How `run_ablation` runs.
struct AblationOptions {
  /// Meta-iterations per row measured for memory, after a warm-up of whole meta-iterations
  /// until every level has taken an optimizer step; the measured window is extended until every
  /// level has stepped in it as well (a level accumulating over 4 of its steps steps once in 4
  /// meta-iterations). The exact meter's peak repeats with that period in these fixed-shape
  /// steps, so one is enough.
  TORCH_ARG(int64_t, iterations) = 1;
  /// Timing rounds: every single-process row's experiment is built (memory tracking off) and
  /// warmed up, then each round times every row (`round_seconds`), in an order rotated by one
  /// row per round. A row's time is its median over the rounds; its time ratio the median
  /// of its per-round ratios to the baseline of the same round, with their range. A row of
  /// several ranks runs in processes of its own, outside the rounds: it measures `rounds`
  /// metered meta-iterations, and so does the baseline, again, in this process just before and
  /// just after it (a slow spell of the machine between the baseline's first measurement and
  /// the row would otherwise move its ratio). 0: the times of the memory measurement instead
  /// (one after the other, meter on).
  TORCH_ARG(int64_t, rounds) = 3;
  /// About how long each row is timed for in a round: whole meta-iterations, as many as reach
  /// it at the pace of the row's memory measurement (at least one, at most 1000; the rounds'
  /// own pace, every row alive, may differ). Where a meta-iteration takes seconds (ResNet-50 on
  /// a CPU) every round times one; where it takes a tenth of one (a GPU) a round times several,
  /// the rows taking turns meta-iteration by meta-iteration and a row with fewer spread over the
  /// round, so a slow spell of the machine falls on all of them alike. A row's round time is
  /// the median of its meta-iterations in that round (which leaves out a cost paid once in
  /// several meta-iterations, such as an optimizer step every 4th under accumulation: the
  /// ablation's weight net's Adam step, negligible there). 0: one per round.
  TORCH_ARG(double, round_seconds) = 1.0;
  /// "" (default): each feature applies to every level where it changes the peak (precision
  /// and accumulation on every level; the model's features on the main problem, the
  /// experiment's default problem). A problem's name narrows the level-wise features to it
  /// (the others keep their baseline batches) and makes it the main problem.
  TORCH_ARG(std::string, problem) = "";
  /// The key of that problem's batch size (the accumulation row divides it by
  /// `accumulation`, keeping the effective batch); "" (default): the experiment's
  /// (`Experiment::memory_keys`). Without one the accumulation row is left out.
  TORCH_ARG(std::string, batch_key) = "";
  /// Batch-size keys of the other problems, by problem. The accumulation row accumulates a
  /// level it applies to over `accumulation` micro-batches of its baseline batch /
  /// `accumulation`, and pins a level it does not apply to at its baseline batch (so a batch
  /// that follows `batch_key`, reweighting's `meta_batch_size: 0`, keeps its size). Problems
  /// not in the experiment are ignored.
  using BatchKeys = std::vector<std::pair<std::string, std::string>>;
  /// The other problems' batch-size keys (`BatchKeys`); empty (default): the experiment's.
  TORCH_ARG(BatchKeys, other_batch_keys) = BatchKeys{};
  /// Micro-batches per optimizer step in the accumulation row.
  TORCH_ARG(int64_t, accumulation) = 4;
  /// The checkpointing row's budget, as a fraction of the no-checkpoint activation peak.
  TORCH_ARG(double, checkpoint_budget) = 0.3;
  /// Overrides (relative to `problems.<problem>.`) of the memory-efficient-activation row: the
  /// model's activation in its memory-efficient form (in-place ReLU; the Swish that keeps only
  /// its input). Empty (default): the experiment's; without any the row is left out.
  TORCH_ARG(std::vector<std::string>, activation_overrides) = std::vector<std::string>{};
  /// Overrides (relative to `problems.<problem>.`) of the in-place finite-difference row: DARTS
  /// steps the weights back instead of restoring a copy (`DartsOptions::exact_restore`).
  TORCH_ARG(std::vector<std::string>, finite_difference_overrides) =
      std::vector<std::string>{"darts.exact_restore=false"};
  /// Ranks of the data-parallel and ZeRO rows (0: leave those rows out).
  TORCH_ARG(int64_t, ranks) = 2;
  /// The main problem's batch (through the experiment's batch key, `Experiment::memory_keys`);
  /// 0 (default): as configured.
  TORCH_ARG(int64_t, batch) = 0;
  /// Keys of the rows to run ("" or empty = all); the baseline always runs (ratios need it).
  TORCH_ARG(std::vector<std::string>, rows) = std::vector<std::string>{};
};

/// One level's parameter footprint in a row (bytes): what it holds between steps, and the
/// gradients its backward produces.
struct LevelFootprint {
  /// The problem's name.
  std::string problem;
  int64_t parameters = 0;  ///< every parameter of its module (fp32 master weights)
  /// Its trainable parameters' size: the gradients a backward returns at once (the full size
  /// under ZeRO-2 too, which keeps only this rank's share after the reduce-scatter).
  int64_t gradients = 0;
  int64_t optimizer_state = 0;  ///< after the measured steps (this rank's share under ZeRO)
};

/// What one row measured. Bytes are tensor-storage bytes unless named rss.
struct AblationRowResult {
  /// The row measured: its key, name, overrides and ranks.
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
  /// Wall time per meta-iteration: the median of `round_seconds`; a row of several ranks with
  /// rounds: the median of its first `rounds` metered meta-iterations; without rounds:
  /// `measured_seconds`.
  double seconds = 0;
  /// Mean wall time per meta-iteration while its memory was measured (meter on, rows one after
  /// the other), over the first `iterations` of the measured window.
  double measured_seconds = 0;
  /// Each meta-iteration of the measured window (meter on). The window holds `iterations`
  /// meta-iterations, and more until every level has taken an optimizer step in it.
  std::vector<double> iteration_seconds;
  /// One meta-iteration's time per timing round, the median of the round's
  /// `round_iterations` (empty when not timed in rounds).
  std::vector<double> round_seconds;
  /// Meta-iterations timed in each round (AblationOptions::round_seconds; 0 when not timed in
  /// rounds).
  int64_t round_iterations = 0;
  /// A row of several ranks timed with rounds: the baseline measured again in this process
  /// (meter on, as the row's ranks are) just before and just after the row's processes ran, its
  /// first `rounds` metered meta-iterations each time. Empty without rounds, or where that
  /// measurement failed: the other one is then the reference alone, and with neither the
  /// baseline's first measurement. Two such rows in a row share the bracket between them.
  std::vector<double> baseline_before_seconds;
  /// The bracket measured just after the row (see `baseline_before_seconds`).
  std::vector<double> baseline_after_seconds;
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
  /// The plan of the timing rounds' experiment where it differs from `plan` (the planner times
  /// blocks, so two builds may pick different plans of nearly equal time); else "".
  std::string timing_plan;
  std::vector<LevelFootprint> footprints;  ///< per level, in the engine's order

  double peak_ratio = 0;   ///< peak / baseline peak
  /// Timed in rounds: the median over rounds of this row's time / the baseline's time in the
  /// same round. A row of several ranks (its own processes, meter on): the median over its
  /// first `rounds` measured meta-iterations / the median of the baseline's meta-iterations
  /// measured just before and just after it (`baseline_before_seconds` and
  /// `baseline_after_seconds` together); the range: its fastest meta-iteration / the slower
  /// bracket's median to its slowest / the faster one's (one bracket or none: see
  /// `baseline_before_seconds`). Without rounds: measured_seconds / the baseline's
  /// measured_seconds.
  double time_ratio = 0;
  /// The range of `time_ratio`: the smallest and largest per-round ratio, or for a row of
  /// several ranks its fastest meta-iteration over the slower bracket's median and its slowest
  /// over the faster one's.
  double time_ratio_low = 0;
  double time_ratio_high = 0;  ///< the high end of that range (see `time_ratio_low`)
  double rss_ratio = 0;    ///< rss growth / baseline rss growth
  double over_floor = 0;   ///< peak / floor
  /// Processes the row ran on; above 1 every byte and time figure is the largest of any rank.
  int64_t ranks = 1;
};

/// The whole ablation.
struct AblationResult {
  /// The configuration file the ablation ran (`run_ablation`'s `config_path`).
  std::string config_path;
  std::string experiment;        ///< the experiment's name (`name:` in the YAML)
  /// The main problem's model as run, overrides included ("resnet32"); "" when the
  /// experiment does not name it.
  std::string model;
  std::string problem;           ///< the varied problem
  std::string description;       ///< the experiment's own description (data, models)
  bool synthetic = false;        ///< whether the data was synthetic
  /// The device of the main problem's parameters ("cpu", "cuda:0").
  std::string device = "cpu";
  int64_t threads = 0;           ///< intra-op threads
  int64_t batch = 0;             ///< the problem's batch in the baseline
  int64_t iterations = 0;        ///< meta-iterations per row measured for memory
  int64_t rounds = 0;            ///< timing rounds (0: times from the memory measurement)
  double round_seconds = 0;      ///< AblationOptions::round_seconds of the rounds that ran
  /// Whether the rounds ran with freed heap memory kept for reuse (memory::HeapReuse; glibc).
  bool heap_reuse = false;
  /// Why the timing rounds did not run, if they were asked for and failed, and which of the
  /// baseline's measurements around the rows of several ranks failed ("" otherwise).
  std::string timing_error;
  std::vector<std::string> overrides;  ///< the user's `--set`s
  /// The measured rows, the baseline first, in the order they ran (a row that failed is in
  /// `missing`).
  std::vector<AblationRowResult> rows;
  /// Rows not measured, with why (a row that failed: its error).
  std::vector<std::string> missing;

  /// The row with `key`; throws `mlo::Error` if absent.
  const AblationRowResult& row(const std::string& key) const;
};

/// The rows for main problem `problem` with batch `batch`: baseline, precision, accumulation,
/// checkpointing, activations, finite_difference, all (or the baseline and `options.rows()`,
/// each once; only the chosen rows' options are checked). The precision row is bf16 (fp16 with
/// loss scaling where the problem runs on CUDA). `other_batches`: the baseline batch of other
/// problems (for `other_batch_keys`); `other_levels`: the other problems the level-wise
/// features (precision, accumulation) apply to.
std::vector<AblationRow> ablation_rows(
    const std::string& problem, int64_t batch, bool cuda, const AblationOptions& options,
    const std::vector<std::pair<std::string, int64_t>>& other_batches = {},
    const std::vector<std::string>& other_levels = {});

/// Runs one row on `ranks` processes (the rendezvous variables set for each) with `overrides`
/// (the user's and the row's), each calling `measure_ablation_row` with `iterations`; returns
/// each rank's result. Throws when a rank fails. (`mlo ablate` starts them as `mlo ablate-rank`.)
using RankRunner = std::function<std::vector<AblationRowResult>(
    const std::vector<std::string>& overrides, int64_t ranks, int64_t iterations)>;

/// Loads `config_path` with `overrides` (as `mlo run --set`), then runs every row: builds the
/// experiment, runs one warm-up meta-iteration and `options.iterations()` measured ones, and
/// computes the floor; then times the single-process rows in `options.rounds()` interleaved
/// rounds. Rows on several ranks run through `ranks` (without one they are listed as not
/// measured) and take their times from their own processes, against the baseline measured
/// again here just before and just after each (with rounds). Calls `progress` with one line per row
/// and per round. Throws `mlo::Error` for a bad configuration or option or a failed baseline; a
/// later row that fails is listed in `missing` with its error.
///
/// `hooks.finished` (optional) gives a single-process row measured by an earlier, interrupted
/// ablation with the same overrides and measured meta-iterations (it is not measured again); `hooks.row_done` is called
/// after each row with the result so far, to write it out before the next row starts.
struct AblationHooks {
  std::function<std::optional<AblationRowResult>(
      const AblationRow& row, const std::vector<std::string>& overrides, int64_t iterations)>
      finished;
  std::function<void(const AblationRowResult& row, const AblationResult& so_far)> row_done;
};
AblationResult run_ablation(const std::string& config_path,
                            const std::vector<std::string>& overrides,
                            const AblationOptions& options,
                            const std::function<void(const std::string&)>& progress = {},
                            const RankRunner& ranks = {}, const AblationHooks& hooks = {});

/// One row's measurement in this process: `config_path` with `overrides` (the row's included),
/// `iterations` measured meta-iterations of `problem` ("": the experiment's default problem) after
/// a warm-up one. Under a distributed
/// strategy this process is one rank (the rendezvous variables say which) and measures itself.
AblationRowResult measure_ablation_row(const std::string& config_path,
                                       const std::vector<std::string>& overrides,
                                       const std::string& problem, int64_t iterations);

}  // namespace run
}  // namespace mlo
