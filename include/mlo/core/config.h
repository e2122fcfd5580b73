#pragma once
/// \file
/// Options structs for problems and the engine: plain values with chained setters.
/// Derived settings and cross-field rules are checked once, when the Engine initializes.

#include <mlo/core/error.h>

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {

/// Hypergradient method a lower problem uses to pass gradients to the problem above it.
enum class Method {
  kDarts,    ///< finite-difference implicit gradient, H^{-1} ~ I (Liu et al., DARTS, 2019)
  kNeumann,  ///< truncated Neumann series for H^{-1} v (Lorraine et al., 2020)
  kCG,       ///< conjugate gradient on H x = v (Rajeswaran et al., iMAML, 2019)
};

/// Numeric precision of a level's forward and loss.
enum class Precision { kFP32, kBF16, kFP16 };

/// Activation checkpointing strategy of a level's model.
enum class Checkpointing { kNone, kUniform, kSqrt, kOptimal, kMinMemory };

/// Whether a larger or a smaller validation metric is better.
enum class Mode { kMin, kMax };

/// The one name table of each enum above: every value with the name configs, YAML validation,
/// builders and logs use for it. `to_string`, `from_string` and `enum_names` read only these.
template <typename E>
struct EnumNames;
template <>
struct EnumNames<Method> {
  static constexpr const char* kWhat = "hypergradient method";
  static constexpr std::pair<Method, const char*> kTable[] = {
      {Method::kDarts, "darts"}, {Method::kNeumann, "neumann"}, {Method::kCG, "cg"}};
};
template <>
struct EnumNames<Precision> {
  static constexpr const char* kWhat = "precision";
  static constexpr std::pair<Precision, const char*> kTable[] = {
      {Precision::kFP32, "fp32"}, {Precision::kBF16, "bf16"}, {Precision::kFP16, "fp16"}};
};
template <>
struct EnumNames<Checkpointing> {
  static constexpr const char* kWhat = "checkpointing strategy";
  static constexpr std::pair<Checkpointing, const char*> kTable[] = {
      {Checkpointing::kNone, "none"},
      {Checkpointing::kUniform, "uniform"},
      {Checkpointing::kSqrt, "sqrt"},
      {Checkpointing::kOptimal, "optimal"},
      {Checkpointing::kMinMemory, "min_memory"}};
};
template <>
struct EnumNames<Mode> {
  static constexpr const char* kWhat = "mode";
  static constexpr std::pair<Mode, const char*> kTable[] = {{Mode::kMin, "min"},
                                                            {Mode::kMax, "max"}};
};

/// The valid names of `E`, in declaration order. Example: `enum_names<Precision>()` is
/// {"fp32", "bf16", "fp16"}.
template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& entry : EnumNames<E>::kTable) out.emplace_back(entry.second);
  return out;
}

/// The value of `E` called `name`, or nullopt when no value has that name.
template <typename E>
std::optional<E> try_from_string(const std::string& name) {
  for (const auto& entry : EnumNames<E>::kTable) {
    if (name == entry.second) return entry.first;
  }
  return std::nullopt;
}

/// The value of `E` called `name`; an unknown name throws `mlo::Error` listing the valid ones,
/// after `key` when given. Example: `from_string<Precision>("bf16")` is `Precision::kBF16`;
/// `from_string<Precision>("fp8", "problems.classifier.precision")` throws
/// "problems.classifier.precision: unknown precision 'fp8'; valid names: fp32, bf16, fp16".
template <typename E>
E from_string(const std::string& name, const std::string& key = "") {
  if (const auto value = try_from_string<E>(name)) return *value;
  std::string valid;
  for (const auto& entry : EnumNames<E>::kTable) {
    valid += (valid.empty() ? "" : ", ") + std::string(entry.second);
  }
  throw Error((key.empty() ? "" : key + ": ") + "unknown " + EnumNames<E>::kWhat + " '" + name +
              "'; valid names: " + valid);
}

namespace detail {
template <typename E>
const char* enum_name(E value) {
  for (const auto& entry : EnumNames<E>::kTable) {
    if (entry.first == value) return entry.second;
  }
  return "unknown";
}
}  // namespace detail

/// Name of an enum value as written in configs and logs ("darts", "bf16", ...).
inline const char* to_string(Method method) { return detail::enum_name(method); }
inline const char* to_string(Precision precision) { return detail::enum_name(precision); }
inline const char* to_string(Checkpointing checkpointing) {
  return detail::enum_name(checkpointing);
}
inline const char* to_string(Mode mode) { return detail::enum_name(mode); }

/// DARTS: eps = alpha / ||v||; result (grad_lambda L(w - eps v) - grad_lambda L(w + eps v)) / 2eps.
struct DartsOptions {
  /// Perturbation size, relative to ||v||.
  TORCH_ARG(double, alpha) = 0.01;
};

/// Neumann series: H^{-1} v ~ alpha * sum_{k=0..K} (I - alpha H)^k v, K = iterations.
/// Converges when 0 < alpha < 2 / lambda_max(H).
struct NeumannOptions {
  TORCH_ARG(int64_t, iterations) = 1;
  TORCH_ARG(double, alpha) = 1.0;
};

/// Conjugate gradient: `iterations` CG steps on (alpha H) x = alpha v; the solution is H^{-1} v
/// for every alpha > 0 (alpha only rescales the system).
struct CGOptions {
  TORCH_ARG(int64_t, iterations) = 1;
  TORCH_ARG(double, alpha) = 1.0;
};

/// Dynamic loss scaling (fp16 turns it on by default; any precision may ask for it).
struct LossScaling {
  TORCH_ARG(double, init_scale) = 65536.0;
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Clean optimizer steps in a row before the scale grows.
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

/// Activation checkpointing of a level's model (an `mlo::nn::Chain`): the strategy and its
/// parameters. Example: `CheckpointingOptions(Checkpointing::kMinMemory).max_overhead(0.3)`.
struct CheckpointingOptions {
  /* implicit */ CheckpointingOptions(Checkpointing strategy = Checkpointing::kNone)
      : strategy_(strategy) {}
  TORCH_ARG(Checkpointing, strategy);
  /// kUniform: number of segments.
  TORCH_ARG(int64_t, segments) = 4;
  /// kOptimal: memory budget in bytes; 0 uses `budget_fraction`.
  TORCH_ARG(int64_t, budget_bytes) = 0;
  /// kOptimal: budget as a fraction of the no-checkpoint peak.
  TORCH_ARG(double, budget_fraction) = 0.5;
  /// kMinMemory: largest time overhead over the no-checkpoint step (0.3 = 30%).
  TORCH_ARG(double, max_overhead) = 0.3;
};

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
  /// Replicate this level over the process group and average its gradients.
  TORCH_ARG(bool, data_parallel) = false;
  /// Activation checkpointing of this level's model: `checkpointing(Checkpointing::kSqrt)` or
  /// `checkpointing(CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(0.4))`.
  TORCH_ARG(CheckpointingOptions, checkpointing) = CheckpointingOptions();

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// Selects the hypergradient method (and its options) this problem uses as a lower level.
  ProblemConfig& method(const DartsOptions& options);
  ProblemConfig& method(const NeumannOptions& options);
  ProblemConfig& method(const CGOptions& options);
  /// Selects a method by value with its default options.
  ProblemConfig& method(Method method);

  Method method() const { return method_; }
  const DartsOptions& darts() const { return darts_; }
  const NeumannOptions& neumann() const { return neumann_; }
  const CGOptions& cg() const { return cg_; }

 private:
  Method method_ = Method::kDarts;
  DartsOptions darts_;
  NeumannOptions neumann_;
  CGOptions cg_;
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
};

}  // namespace mlo
