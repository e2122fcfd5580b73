#pragma once
/// \file
/// Options structs for problems and the engine: plain values with chained setters. Each
/// describes its own keys (`visit`, base/fields.h), which is how YAML reads and writes them and
/// where every range check is (the engine applies the same checks to values set in code).
/// Rules across keys are written once, as `validate` (the first broken one, with its key): the
/// Engine applies them when it initializes, and the YAML reader before anything is built,
/// naming the file, line and key.

#include <mlo/base/enum_names.h>
#include <mlo/base/error.h>
#include <mlo/base/fields.h>
#include <mlo/core/method.h>
#include <mlo/dist/strategy.h>
#include <mlo/memory/options.h>

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mlo {

/// Whether a larger or a smaller validation metric is better.
enum class Mode { kMin, kMax };

/// The one name table of each enum above (see base/enum_names.h for the helpers).
template <>
struct EnumNames<Mode> {
  /// What the values are, for errors ("unknown mode 'x'").
  static constexpr const char* kWhat = "mode";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<Mode, const char*> kTable[] = {{Mode::kMin, "min"},
                                                            {Mode::kMax, "max"}};
};

/// Name of an enum value as written in configs and logs ("min", "max").
inline const char* to_string(Mode mode) { return detail::enum_name(mode); }

struct EngineConfig;

/// Per-problem configuration. Example:
/// `ProblemConfig().unroll_steps(10).method(NeumannOptions().iterations(5)).gradient_clipping(1)`
/// (`NeumannOptions` from mlo/hypergrad/neumann.h; any registered method's options fit). The
/// YAML keys of a problem (`problems.<name>.unroll_steps`, ...) are these members, with these
/// defaults (`visit`).
struct ProblemConfig {
  /// Optimizer steps this (lower) problem takes before its parents step once (>= 1).
  TORCH_ARG(int64_t, unroll_steps) = 1;
  /// Local steps during which the parents are not stepped at all (>= 0).
  TORCH_ARG(int64_t, warmup_steps) = 0;
  /// After its parents step, restore the state from before the unroll and redo one step.
  TORCH_ARG(bool, roll_back) = false;
  /// Maximum global L2 norm of the gradient before an optimizer step; 0 disables clipping.
  TORCH_ARG(double, gradient_clipping) = 0.0;
  /// Log one line every `log_step` local steps; 0 uses the engine's `log_step`.
  TORCH_ARG(int64_t, log_step) = 0;
  /// Micro-steps per optimizer step (loss divided by this; >= 1).
  TORCH_ARG(int64_t, gradient_accumulation) = 1;
  /// Precision of this level's forward and loss (autocast; also inside hypergradients).
  TORCH_ARG(Precision, precision) = Precision::kFP32;
  /// Dynamic loss scaling of this level; fp16 uses `LossScaling()` when this is unset. YAML:
  /// `loss_scaling: {enabled: true, init_scale: ...}` sets it (`enabled: false`, the default,
  /// leaves it unset).
  TORCH_ARG(std::optional<LossScaling>, loss_scaling) = std::nullopt;
  /// Under a distributed engine strategy: true (default) shards this level's batches over the
  /// ranks and averages its gradients and hypergradient vectors; false opts the level out (every
  /// rank reads the same, full batches of it and no collective runs for its own gradient).
  /// Ignored with `Strategy::kDefault`.
  TORCH_ARG(bool, data_parallel) = true;
  /// A trainable parameter of this level that its own loss does not reach gets no gradient. By
  /// default that is an error naming the parameter (it would otherwise train with a silent zero
  /// gradient) for a level whose gradient is its loss's alone (no hypergradient path); true
  /// accepts it as a zero gradient (a head used by some batches only, a branch frozen for a
  /// while). An upper level's parameters that enter only through a lower level are always fine.
  TORCH_ARG(bool, allow_unused_parameters) = false;
  /// Activation checkpointing of this level's model: `checkpointing(Checkpointing::kSqrt)` or
  /// `checkpointing(CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(0.4))`.
  TORCH_ARG(CheckpointingOptions, checkpointing) = CheckpointingOptions();
  /// Under strategy zero3 on a CUDA model: `Offload::kCpu` keeps this level's parameter shards,
  /// their gradients and the optimizer state in host memory, moving one unit's shard to the GPU
  /// for its gather (docs/distributed.md). Refused elsewhere (no zero3, a model on the CPU).
  TORCH_ARG(Offload, offload) = Offload::kNone;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// Selects the hypergradient method this problem uses as a lower level, with its options:
  /// `method(DartsOptions().alpha(0.02))`, or any type derived from `MethodOptions`.
  template <typename Options,
            typename = std::enable_if_t<std::is_base_of<MethodOptions, Options>::value>>
  ProblemConfig& method(const Options& options) {
    method_ = options.clone();
    return *this;
  }
  /// Selects a registered method by name with its default options (`method("neumann")`);
  /// throws `mlo::Error` listing the registered names for an unknown one.
  ProblemConfig& method(const std::string& name);

  /// The selected method's options (DARTS with its defaults when none was selected).
  const MethodOptions& method() const;
  /// The selected method's options as `Options`, or null when another method is selected.
  template <typename Options>
  const Options* method_as() const {
    return dynamic_cast<const Options*>(&method());
  }

  /// Describes the keys, with the checks of single values: the members above, `method` (a
  /// registered name) with the selected method's section (`neumann: {iterations: 5}`), and
  /// every other registered method's section as an alternative (read and validated, not kept).
  void visit(Fields& fields);
  /// The first rule across keys these settings break under `engine`'s (a key relative to the
  /// problem: "roll_back", "checkpointing.strategy", "offload", "<method>.<key>"), or nothing.
  /// What only the built problem tells (its module's type, its device) the Engine checks.
  std::optional<OptionError> validate(const EngineConfig& engine) const;

 private:
  // NOTE: shared and never changed after it is set (every setter replaces it), so copies of a
  // config share it safely; null until a method is selected.
  std::shared_ptr<const MethodOptions> method_;
};

/// Stop training when a validation metric stops improving.
struct EarlyStopping {
  /// Whether early stopping is on: true for a rule built in code
  /// (`EngineConfig().early_stopping(EarlyStopping().metric("valid/acc").mode(Mode::kMax))`);
  /// an `EngineConfig` starts with it off.
  TORCH_ARG(bool, enabled) = true;
  /// Name of the metric returned by the validation hook.
  TORCH_ARG(std::string, metric) = "valid/loss";
  /// Whether a smaller (`kMin`, the default) or a larger (`kMax`) `metric` is better.
  TORCH_ARG(Mode, mode) = Mode::kMin;
  /// Number of validations without improvement after which training stops (>= 1).
  TORCH_ARG(int64_t, tolerance) = 5;
  /// Smallest change that counts as an improvement (>= 0).
  TORCH_ARG(double, min_delta) = 0.0;
  /// Keep a host copy of every problem's parameters and buffers at each improvement (also in
  /// saved states), for `Engine::restore_best` once training is over: what follows (the test
  /// evaluation) then sees the validation-chosen model rather than the last one.
  TORCH_ARG(bool, restore_best) = true;

 public:
  /// Describes the keys (YAML `engine.early_stopping`), with their checks.
  void visit(Fields& fields);
};

/// The longest `EngineConfig::timeout_s` (a day, as `mlo launch --grace`): longer waits are
/// hangs, and the deadlines stay far from overflowing their millisecond arithmetic.
inline constexpr double kMaxTimeoutSeconds = 86400;

/// Engine configuration. Example: `EngineConfig().train_iters(2000).valid_step(100)`. The YAML
/// keys of `engine:` are these members, with these defaults (`visit`).

struct EngineConfig {
  /// Global steps; each global step steps every leaf problem once (>= 0).
  TORCH_ARG(int64_t, train_iters) = 1000;
  /// Call the validation hook every `valid_step` global steps; 0 never.
  TORCH_ARG(int64_t, valid_step) = 500;
  /// Logging period of every problem without its own, in its local steps (0 disables
  /// training logs); a run (`mlo::Run`) also writes every problem's metrics every `log_step`
  /// global steps.
  TORCH_ARG(int64_t, log_step) = 100;
  /// Meter tensor memory: each problem's metrics get "mem_peak_mb" (peak of its latest local
  /// step) and the engine keeps per-phase statistics (see `Engine::memory_meter`).
  TORCH_ARG(bool, track_memory) = false;
  /// Early stopping on a validation metric (off unless set); needs `valid_step` > 0.
  TORCH_ARG(EarlyStopping, early_stopping) = EarlyStopping().enabled(false);
  /// Data parallelism over the processes of a launch (docs/distributed.md): `kDefault` is one
  /// process; the others join the process group that RANK, WORLD_SIZE, MASTER_ADDR and
  /// MASTER_PORT describe (or the one given to `Engine::process_group`).
  TORCH_ARG(dist::Strategy, strategy) = dist::Strategy::kDefault;
  /// Collective backend: gloo (CPU) or nccl (CUDA builds).
  TORCH_ARG(dist::Backend, backend) = dist::Backend::kGloo;
  /// Longest wait, in seconds, of the rendezvous and of any collective: a rank that died or
  /// hangs makes the others fail with an error after at most this long (> 0, at most
  /// `kMaxTimeoutSeconds`).
  TORCH_ARG(double, timeout_s) = 300.0;

 public:
  /// Describes the keys, with the checks of single values.
  void visit(Fields& fields);
  /// The first rule across keys these settings break (a key relative to `engine:`, e.g.
  /// "early_stopping"), or nothing.
  std::optional<OptionError> validate() const;
};

}  // namespace mlo
