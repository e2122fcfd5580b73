#pragma once
/// \file
/// Options structs for problems and the engine: plain values with chained setters.
/// Derived settings and cross-field rules are checked once, when the Engine initializes.

#include <mlo/base/enum_names.h>
#include <mlo/base/error.h>
#include <mlo/dist/strategy.h>
#include <mlo/hypergrad/cg.h>
#include <mlo/hypergrad/darts.h>
#include <mlo/hypergrad/neumann.h>
#include <mlo/hypergrad/sama.h>
#include <mlo/hypergrad/unrolled.h>
#include <mlo/memory/options.h>

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {

/// Hypergradient method a lower problem uses to pass gradients to the problem above it.
enum class Method {
  kDarts,     ///< finite-difference implicit gradient, H^{-1} ~ I (Liu et al., DARTS, 2019)
  kNeumann,   ///< truncated Neumann series for H^{-1} v (Lorraine et al., 2020)
  kCG,        ///< conjugate gradient on H x = v (Rajeswaran et al., iMAML, 2019)
  kSama,      ///< DARTS along the optimizer-preconditioned vector (Choe et al., SAMA, 2023)
  kUnrolled,  ///< reverse mode through the K inner steps (Franceschi et al., 2017)
};

/// Whether a larger or a smaller validation metric is better.
enum class Mode { kMin, kMax };

/// The one name table of each enum above (see base/enum_names.h for the helpers).
template <>
struct EnumNames<Method> {
  static constexpr const char* kWhat = "hypergradient method";
  static constexpr std::pair<Method, const char*> kTable[] = {{Method::kDarts, "darts"},
                                                              {Method::kNeumann, "neumann"},
                                                              {Method::kCG, "cg"},
                                                              {Method::kSama, "sama"},
                                                              {Method::kUnrolled, "unrolled"}};
};
template <>
struct EnumNames<Mode> {
  static constexpr const char* kWhat = "mode";
  static constexpr std::pair<Mode, const char*> kTable[] = {{Mode::kMin, "min"},
                                                            {Mode::kMax, "max"}};
};

/// Name of an enum value as written in configs and logs ("darts", "bf16", ...).
inline const char* to_string(Method method) { return detail::enum_name(method); }
inline const char* to_string(Mode mode) { return detail::enum_name(mode); }

/// Per-problem configuration. Example:
/// `ProblemConfig().unroll_steps(10).method(NeumannOptions().iterations(5)).gradient_clipping(1)`
struct ProblemConfig {
  /// Optimizer steps this (lower) problem takes before its parents step once.
  TORCH_ARG(int64_t, unroll_steps) = 1;
  /// Local steps during which the parents are not stepped at all.
  TORCH_ARG(int64_t, warmup_steps) = 0;
  /// After its parents step, restore the state from before the unroll and redo one step.
  TORCH_ARG(bool, roll_back) = false;
  /// Maximum global L2 norm of the gradient before an optimizer step; 0 disables clipping.
  TORCH_ARG(double, gradient_clipping) = 0.0;
  /// Log one line every `log_step` local steps; 0 uses the engine's `log_step`.
  TORCH_ARG(int64_t, log_step) = 0;
  /// Micro-steps per optimizer step (loss divided by this).
  TORCH_ARG(int64_t, gradient_accumulation) = 1;
  /// Precision of this level's forward and loss (autocast; also inside hypergradients).
  TORCH_ARG(Precision, precision) = Precision::kFP32;
  /// Dynamic loss scaling of this level; fp16 uses `LossScaling()` when this is unset.
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

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// Selects the hypergradient method (and its options) this problem uses as a lower level.
  ProblemConfig& method(const DartsOptions& options);
  ProblemConfig& method(const NeumannOptions& options);
  ProblemConfig& method(const CGOptions& options);
  ProblemConfig& method(const SamaOptions& options);
  ProblemConfig& method(const UnrolledOptions& options);
  /// Selects a method by value with its default options.
  ProblemConfig& method(Method method);

  Method method() const { return method_; }
  const DartsOptions& darts() const { return darts_; }
  const NeumannOptions& neumann() const { return neumann_; }
  const CGOptions& cg() const { return cg_; }
  const SamaOptions& sama() const { return sama_; }
  const UnrolledOptions& unrolled() const { return unrolled_; }

 private:
  Method method_ = Method::kDarts;
  DartsOptions darts_;
  NeumannOptions neumann_;
  CGOptions cg_;
  SamaOptions sama_;
  UnrolledOptions unrolled_;
};

/// Stop training when a validation metric stops improving.
struct EarlyStopping {
  /// Name of the metric returned by the validation hook.
  TORCH_ARG(std::string, metric) = "loss";
  TORCH_ARG(Mode, mode) = Mode::kMin;
  /// Number of validations without improvement after which training stops.
  TORCH_ARG(int64_t, tolerance) = 5;
  /// Smallest change that counts as an improvement.
  TORCH_ARG(double, min_delta) = 0.0;
};

/// Engine configuration. Example: `EngineConfig().train_iters(2000).valid_step(100)`.
struct EngineConfig {
  /// Global steps; each global step steps every leaf problem once.
  TORCH_ARG(int64_t, train_iters) = 1000;
  /// Call the validation hook every `valid_step` global steps; 0 never.
  TORCH_ARG(int64_t, valid_step) = 0;
  /// Default logging period of every problem, in its local steps; 0 disables training logs.
  TORCH_ARG(int64_t, log_step) = 0;
  /// Meter tensor memory: each problem's metrics get "mem_peak_mb" (peak of its latest local
  /// step) and the engine keeps per-phase statistics (see `Engine::memory_meter`).
  TORCH_ARG(bool, track_memory) = false;
  /// Early stopping on a validation metric; needs `valid_step` > 0.
  TORCH_ARG(std::optional<EarlyStopping>, early_stopping) = std::nullopt;
  /// Data parallelism over the processes of a launch (docs/distributed.md): `kDefault` is one
  /// process; the others join the process group that RANK, WORLD_SIZE, MASTER_ADDR and
  /// MASTER_PORT describe (or the one given to `Engine::process_group`).
  TORCH_ARG(dist::Strategy, strategy) = dist::Strategy::kDefault;
  /// Collective backend: gloo (CPU) or nccl (CUDA builds).
  TORCH_ARG(dist::Backend, backend) = dist::Backend::kGloo;
  /// Longest wait, in seconds, of the rendezvous and of any collective: a rank that died or
  /// hangs makes the others fail with an error after at most this long.
  TORCH_ARG(double, timeout_s) = 300.0;
};

}  // namespace mlo
