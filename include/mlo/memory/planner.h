#pragma once
/// \file
/// Checkpointing planner for `mlo::nn::Chain`s: profile every block (exact meter and a timer),
/// predict the peak memory and the time of a training step under a plan, and find plans:
/// uniform, sqrt, the fastest plan under a memory budget and the smallest-memory plan under a
/// time-overhead cap (both exact for the cost model below, by dynamic programming).
///
/// Plans: the chain is cut into contiguous segments; a segment is either stored (run plainly,
/// its activations kept for backward) or checkpointed (run through `memory::checkpoint`: only
/// its input is kept, it is recomputed in backward). This is the single-recomputation family of
/// Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing for heterogeneous
/// chains: how to train deep neural networks with limited memory", 2019 (arXiv:1911.13214),
/// with their per-block memory and time costs; docs/checkpointing.md derives the model.

#include <mlo/memory/options.h>
#include <mlo/nn/chain.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace memory {

/// What the planner measured for one block (bytes are tensor-storage bytes, exact on CPU).
struct BlockProfile {
  /// The block's name in the chain (`ChainImpl::block_name`).
  std::string name;
  int64_t input_bytes = 0;   ///< the block's input
  int64_t output_bytes = 0;  ///< its output
  /// Kept alive by a forward with grad (what backward needs, the output included).
  int64_t retained_bytes = 0;
  int64_t forward_peak = 0;  ///< peak above the start of a forward with grad (>= retained)
  int64_t nograd_peak = 0;   ///< peak above the start of a forward without grad (output incl.)
  /// Peak above the start of the block's backward, whose start already counts the retained
  /// bytes and the output gradient; the output is released during it, as in a real backward.
  int64_t backward_peak = 0;
  int64_t input_grad_bytes = 0;  ///< 0 when the input needs no gradient
  int64_t param_grad_bytes = 0;  ///< gradients of its parameters that require grad
  /// Time of a forward with grad, in seconds (wall clock, or process CPU time with
  /// `ProfileOptions::process_cpu_time`; the fastest of the `repeats` passes).
  double forward_seconds = 0;
  /// Time of a forward without grad, in seconds (measured as `forward_seconds`).
  double nograd_seconds = 0;
  /// Time of the block's backward, in seconds (measured as `forward_seconds`; 0 when
  /// nothing in it needs a gradient).
  double backward_seconds = 0;
};

/// Profile of a whole chain on one sample input.
struct ChainProfile {
  /// One profile per block, in chain order.
  std::vector<BlockProfile> blocks;
  /// The number of blocks.
  std::size_t size() const { return blocks.size(); }
};

/// Runs every block of `chain` on `sample` (each block on the previous block's output) three
/// ways: forward without grad, forward with grad, backward, metering each with an exact
/// `MemoryMeter` and a clock. The chain's buffers (batch-norm statistics) and the random
/// generators' states are restored afterwards; parameter gradients are not touched.
/// The blocks' modes (train/eval) are used as they are. Throws `mlo::Error` for an empty chain.
///
/// ```
/// auto profile = mlo::memory::profile_chain(*model, torch::randn({32, 3, 32, 32}));
/// ```
ChainProfile profile_chain(nn::ChainImpl& chain, const torch::Tensor& sample,
                           const ProfileOptions& options = ProfileOptions());

/// Blocks [begin, end), stored or checkpointed.
struct Segment {
  /// The first block of the segment.
  std::size_t begin = 0, end = 0;
  /// Whether the segment is checkpointed (its forward runs without grad and is recomputed in
  /// backward) rather than stored.
  bool checkpointed = false;
  /// Same blocks, same choice.
  bool operator==(const Segment& other) const {
    return begin == other.begin && end == other.end && checkpointed == other.checkpointed;
  }
  /// \var end
  /// \brief One past the last block of the segment.
};

/// Predicted cost of a training step (forward, backward) under a plan.
struct PlanCost {
  int64_t peak_bytes = 0;  ///< peak above the memory at the start of the step
  /// Predicted time of the step, in seconds (from the profile's timings).
  double seconds = 0;
};

/// Simulates a step under `segments` (must cover the profile's blocks in order) event by event:
/// forward of every segment, then backward of every segment in reverse, with recomputation of
/// checkpointed ones. Throws `mlo::Error` for segments that do not tile the chain.
PlanCost evaluate(const ChainProfile& profile, const std::vector<Segment>& segments,
                  const CostModel& model = CostModel());

/// The fastest plan whose predicted peak is at most `budget_bytes`, or nullopt when none is.
/// Exact for `evaluate`'s model (dynamic program over Pareto fronts; see docs/checkpointing.md).
std::optional<std::vector<Segment>> solve_budget(const ChainProfile& profile, int64_t budget_bytes,
                                                 const CostModel& model = CostModel());

/// The plan with the smallest predicted peak among those predicted to take at most
/// `max_seconds` (the smallest peak overall for infinity). Exact: bisection on the budget over
/// integers with `solve_budget`. The all-stored plan (the fastest) is returned when even it
/// takes longer than `max_seconds`.
std::vector<Segment> solve_min_memory(const ChainProfile& profile, double max_seconds,
                                      const CostModel& model = CostModel());

/// A checkpointing plan with its predictions.
struct CheckpointPlan {
  /// The strategy the plan was made for.
  Checkpointing strategy = Checkpointing::kNone;
  /// The segments, tiling the chain's blocks in order.
  std::vector<Segment> segments;
  PlanCost predicted;  ///< under this plan
  PlanCost baseline;   ///< with nothing checkpointed
  /// Block names, for `to_string`.
  std::vector<std::string> block_names;
  /// Why the plan is not the one the strategy asked for, or "": "no plan fits the budget of
  /// 120.0 MiB; the smallest-memory plan" (kOptimal falls back so).
  std::string fallback;

  /// Whether block `i` is inside a checkpointed segment.
  bool is_checkpointed(std::size_t i) const;
  /// Number of checkpointed segments.
  std::size_t num_checkpointed() const;
  /// predicted.peak / baseline.peak (1 when the baseline peak is 0).
  double memory_ratio() const;
  /// predicted.seconds / baseline.seconds - 1 (0 when the baseline time is 0).
  double time_overhead() const;
  /// One line per block ("layer1.0  checkpoint (segment 1: blocks 1-3)"), then the predictions.
  std::string to_string() const;
};

/// Stored segments of one block each and checkpointed segments: the plan's segment list for
/// "checkpoint these [begin, end) ranges" (helper for hand-made plans and tests).
std::vector<Segment> make_segments(std::size_t num_blocks,
                                   const std::vector<std::pair<std::size_t, std::size_t>>& ranges);

/// Throws `mlo::Error` for invalid options: segments < 1, negative budget_bytes or
/// max_overhead, budget_fraction outside (0, 1], profile repeats < 1. (For config checks.)
void validate_options(const CheckpointingOptions& options);

/// Throws `mlo::Error` unless `segments` tile blocks [0, num_blocks) in order.
void validate_segments(const std::vector<Segment>& segments, std::size_t num_blocks);

/// Plans for a profiled chain according to `options`. kNone: everything stored; kUniform:
/// `segments` equal segments, all but the last checkpointed; kSqrt: the same with
/// round(sqrt(n)) segments; kOptimal: `solve_budget` (falls back to the smallest-memory plan,
/// with a warning, when the budget is below what any plan reaches); kMinMemory:
/// `solve_min_memory` with a cap of (1 + max_overhead) times the no-checkpoint time.
/// Throws `mlo::Error` for invalid options (see `validate_options`).
CheckpointPlan make_plan(const ChainProfile& profile, const CheckpointingOptions& options);

/// `make_plan(profile_chain(chain, sample_input, options.profile()), options)`.
CheckpointPlan plan_checkpointing(nn::ChainImpl& chain, const torch::Tensor& sample_input,
                                  const CheckpointingOptions& options);

/// Installs the plan as the chain's executor: `chain.forward(x)` then runs stored segments with
/// `forward_range` and checkpointed ones with `checkpoint_range`. A plan without checkpointed
/// segments clears the executor. Throws `mlo::Error` if the plan does not tile the chain.
void apply_plan(nn::ChainImpl& chain, const CheckpointPlan& plan);

/// Filled by the executor `configure_checkpointing` installs, at the chain's first forward.
struct LazyPlan {
  /// The plan once made (at the chain's first forward); nullopt before.
  std::optional<CheckpointPlan> plan;
};

/// Engine entry point: checkpoints `module` per `options`, planning lazily. For kNone, clears
/// a chain's executor and returns null. Otherwise `module` must be an `nn::ChainImpl` (throws
/// `mlo::Error` naming `owner` if not); an executor is installed that, on the first forward,
/// profiles the chain on that batch, plans (logging the plan through spdlog) and from then on
/// runs the plan; the returned object shows the plan once made. The profile runs the chain a
/// few extra times on the first batch, without side effects on the model or the random stream.
///
/// ```
/// mlo::nn::Chain model = mlo::nn::resnet50();
/// auto lazy = mlo::memory::configure_checkpointing(*model, "inner",
///     mlo::memory::CheckpointingOptions(mlo::Checkpointing::kMinMemory).max_overhead(0.3));
/// auto logits = model->forward(batch);  // profiles and plans, then runs the plan
/// spdlog::info("{}", lazy->plan->to_string());
/// ```
std::shared_ptr<const LazyPlan> configure_checkpointing(torch::nn::Module& module,
                                                        const std::string& owner,
                                                        const CheckpointingOptions& options);

}  // namespace memory
}  // namespace mlo
