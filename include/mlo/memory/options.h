#pragma once
/// \file
/// The memory knobs of one level, as plain options (no LibTorch beyond `torch/arg.h`), each
/// describing its own keys (`visit`, base/fields.h): its
/// precision, loss scaling and activation checkpointing. `ProblemConfig` holds them; the memory
/// area (precision.h, planner.h) implements them.

#include <mlo/base/enum_names.h>
#include <mlo/base/fields.h>

#include <torch/arg.h>

#include <cstdint>
#include <utility>

namespace mlo {

/// Numeric precision of a level's forward and loss.
enum class Precision { kFP32, kBF16, kFP16 };

/// Activation checkpointing strategy of a level's model.
enum class Checkpointing { kNone, kUniform, kSqrt, kOptimal, kMinMemory };

/// The names of `Precision` in configs and logs: "fp32", "bf16", "fp16".
template <>
struct EnumNames<Precision> {
  /// What the values are, for errors ("unknown precision 'x'").
  static constexpr const char* kWhat = "precision";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<Precision, const char*> kTable[] = {
      {Precision::kFP32, "fp32"}, {Precision::kBF16, "bf16"}, {Precision::kFP16, "fp16"}};
};
/// The names of `Checkpointing` in configs and logs: "none", "uniform", "sqrt", "optimal",
/// "min_memory".
template <>
struct EnumNames<Checkpointing> {
  /// What the values are, for errors ("unknown checkpointing strategy 'x'").
  static constexpr const char* kWhat = "checkpointing strategy";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<Checkpointing, const char*> kTable[] = {
      {Checkpointing::kNone, "none"},
      {Checkpointing::kUniform, "uniform"},
      {Checkpointing::kSqrt, "sqrt"},
      {Checkpointing::kOptimal, "optimal"},
      {Checkpointing::kMinMemory, "min_memory"}};
};

/// Where a level's parameter shards and optimizer state live under strategy zero3.
enum class Offload {
  kNone,  ///< with the model (on its device)
  kCpu,   ///< in host memory, moved to the model's GPU one unit at a time (CUDA only)
};
/// The names of `Offload` in configs and logs: "none", "cpu".
template <>
struct EnumNames<Offload> {
  /// What the values are, for errors ("unknown offload 'x'").
  static constexpr const char* kWhat = "offload";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<Offload, const char*> kTable[] = {{Offload::kNone, "none"},
                                                               {Offload::kCpu, "cpu"}};
};
/// Name of an offload choice as written in configs and logs ("cpu").
inline const char* to_string(Offload offload) { return detail::enum_name(offload); }

/// Name of a precision as written in configs and logs ("bf16").
inline const char* to_string(Precision precision) { return detail::enum_name(precision); }
/// Name of a checkpointing strategy as written in configs and logs ("min_memory").
inline const char* to_string(Checkpointing checkpointing) {
  return detail::enum_name(checkpointing);
}

/// Dynamic loss scaling (fp16 turns it on by default; any precision may ask for it).
struct LossScaling {
  /// The scale at the start (> 0).
  TORCH_ARG(double, init_scale) = 65536.0;
  /// Factor (> 1) the scale is multiplied by after `growth_interval` clean steps.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// Factor, in (0, 1), the scale is multiplied by after a step with inf/nan gradients.
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Clean optimizer steps in a row before the scale grows (>= 1).
  TORCH_ARG(int64_t, growth_interval) = 2000;

 public:
  /// Describes the keys (YAML `loss_scaling:` of a problem), with their checks.
  void visit(Fields& fields);
};

namespace memory {

/// How the checkpointing planner profiles a chain (`profile_chain`).
struct ProfileOptions {
  /// Timed passes over the chain; each block keeps its fastest. Memory comes from the first.
  TORCH_ARG(int64_t, repeats) = 1;
  /// Time with the process's CPU time instead of the wall clock: steadier on a shared CPU
  /// machine (other processes' load does not count); for CPU runs only.
  TORCH_ARG(bool, process_cpu_time) = false;

 public:
  /// Describes the keys, with their checks.
  void visit(Fields& fields);
};

/// How the planner's cost model counts parameter gradients.
struct CostModel {
  /// true: parameter gradients are new tensors kept until the end of backward (the engine's
  /// `torch::autograd::grad`, or `.grad` set to none before the step); false: `.grad` already
  /// exists and backward accumulates into it in place (steady-state training loops).
  TORCH_ARG(bool, keep_param_grads) = true;

 public:
  /// Describes the keys.
  void visit(Fields& fields);
};

}  // namespace memory

/// Activation checkpointing of a level's model (an `mlo::nn::Chain`): the strategy, its
/// parameters and the planner's knobs. The one options struct for checkpointing: the engine,
/// the planner, `mlo plan` and YAML all use it; `memory::validate_options` checks it once,
/// where it enters (engine initialization, `mlo plan`, the YAML reader).
/// Example: `CheckpointingOptions(Checkpointing::kMinMemory).max_overhead(0.3)`.
struct CheckpointingOptions {
  /// `strategy` with its parameters at their defaults; implicit, so a plain `Checkpointing`
  /// converts.
  /* implicit */ CheckpointingOptions(Checkpointing strategy = Checkpointing::kNone)
      : strategy_(strategy) {}
  /// The strategy; `kNone` turns checkpointing off.
  TORCH_ARG(Checkpointing, strategy);
  /// kUniform: number of segments (all checkpointed but the last).
  TORCH_ARG(int64_t, segments) = 4;
  /// kOptimal: memory budget in bytes (peak above the step's start); 0 uses `budget_fraction`.
  TORCH_ARG(int64_t, budget_bytes) = 0;
  /// kOptimal: budget as a fraction of the predicted no-checkpoint peak.
  TORCH_ARG(double, budget_fraction) = 0.5;
  /// kMinMemory: largest predicted time overhead over the no-checkpoint step (0.3 = 30%).
  TORCH_ARG(double, max_overhead) = 0.3;
  /// The planner's cost model and profiling (defaults suit training steps).
  TORCH_ARG(memory::CostModel, cost_model) = memory::CostModel();
  /// How the planner profiles the chain before it plans (`profile_chain`).
  TORCH_ARG(memory::ProfileOptions, profile) = memory::ProfileOptions();

 public:
  /// Describes the keys (YAML `checkpointing:` of a problem), with the checks of single values;
  /// `memory::validate_options` applies the same checks to values set in code.
  void visit(Fields& fields);
};

}  // namespace mlo
