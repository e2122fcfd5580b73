#pragma once
/// \file
/// `mlo::hypergrad::Unrolled`: reverse-mode differentiation through the K inner optimizer steps
/// of an unroll, optionally with binomial checkpointing of the inner trajectory.
///
/// Papers: D. Maclaurin, D. Duvenaud, R. Adams, "Gradient-based Hyperparameter Optimization
/// through Reversible Learning", ICML 2015 (arXiv:1502.03492); L. Franceschi, M. Donini,
/// P. Frasconi, M. Pontil, "Forward and Reverse Gradient-Based Hyperparameter Optimization",
/// ICML 2017 (arXiv:1703.01785), Sec. 2.1 (reverse mode); checkpointing: A. Griewank,
/// A. Walther, "Algorithm 799: revolve", ACM TOMS 26 (2000).

#include <mlo/base/enum_names.h>

#include <mlo/core/method.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace mlo {

/// How `unrolled` keeps the inner trajectory for the reverse sweep.
enum class UnrollCheckpointing {
  kNone,      ///< every inner state is kept: O(K) states, K recomputed steps
  kBinomial,  ///< revolve-style snapshots: O(log K) states, O(K log K) recomputed steps
};

/// The names of `UnrollCheckpointing` in configs and logs: "none", "binomial".
template <>
struct EnumNames<UnrollCheckpointing> {
  /// What the values are, for errors ("unknown unrolled checkpointing 'x'").
  static constexpr const char* kWhat = "unrolled checkpointing";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<UnrollCheckpointing, const char*> kTable[] = {
      {UnrollCheckpointing::kNone, "none"}, {UnrollCheckpointing::kBinomial, "binomial"}};
};

/// Options of `unrolled`.
struct UnrolledOptions : MethodOptionsFor<UnrolledOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "unrolled";
  /// `kNone` or `kBinomial`.
  TORCH_ARG(UnrollCheckpointing, checkpointing) = UnrollCheckpointing::kNone;
  /// Binomial: inner states stored at once besides the unroll's start; 0 derives it (from
  /// `budget_bytes` when set, else ceil(log2 K)).
  TORCH_ARG(int64_t, snapshots) = 0;
  /// Binomial: bytes the stored snapshots may take (parameters plus optimizer state per
  /// state); snapshots = budget_bytes / bytes of one state. The unroll's start state, the
  /// working state and the recorded micro-batches are not counted. Must hold at least one
  /// state (else `mlo::Error`); 0: not used. Give `snapshots` or `budget_bytes`, not both.
  TORCH_ARG(int64_t, budget_bytes) = 0;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// The keys of the `unrolled:` section of a problem.
  void visit(Fields& fields) override;
  /// snapshots and budget_bytes: not both, and only with binomial checkpointing.
  std::optional<OptionError> validate() const override;
  std::unique_ptr<Hypergradient> make() const override;
};


struct Batch;

namespace hypergrad {

struct OptimizerState;
class DifferentiableOptimizer;

/// The hypergradient of the *unrolled* objective: with w_0 the lower problem's state at the
/// start of the unroll and w_t = Phi_t(w_{t-1}, lambda) its K optimizer steps (the user's SGD,
/// Adam or AdamW, written as differentiable updates, `DifferentiableOptimizer`), the result is
///
///   (d w_K / d lambda)^T v = sum_t (d Phi_t / d lambda)^T a_t,   a_{t-1} = (d Phi_t / d s)^T a_t,
///
/// a_K = v, exact up to rounding (no fixed-point assumption: few-shot learning, short
/// horizons), with w_0 held constant: a start that depends on lambda (MAML's w_0 = lambda) is
/// not followed (`differentiates_unroll`). The state s includes the optimizer's momentum /
/// moments.
///
/// The lower problem tells the method where an unroll starts (`on_unroll_start`: its parameters
/// and optimizer state are copied) and what each step used (`before_optimizer_step`: the
/// micro-batches and learning rates); `apply` replays the steps from the start copy. With
/// `kNone` the forward replay keeps all K states; with `kBinomial` it keeps `snapshots`
/// (`binomial_schedule`) and recomputes the rest, O(log K) states for O(K log K) steps.
///
/// Not replayed (refused where they can be detected): gradient clipping; `grad_callback`,
/// `param_callback` and `custom_optimizer_step` act on the real run only; randomness inside
/// `training_step` (dropout) differs between the run and the replay. A replay that does not
/// reach the lower problem's current weights is reported with a warning (checked on the first
/// `apply` only).
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().unroll_steps(100).method(
///     mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial)));
/// ```
class Unrolled : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit Unrolled(UnrolledOptions options);
  ~Unrolled() override;

  /// Hessian-vector products of the lower loss: true.
  bool second_order() const override { return true; }
  /// Differentiates the unroll from its start: true.
  bool differentiates_unroll() const override { return true; }
  /// See the class comment; `v` over `curr`'s trainable parameters, result over `prev`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;
  void on_unroll_start(Level& curr) override;
  void before_optimizer_step(Level& curr) override;
  /// Refuses an optimizer without a differentiable update rule, gradient clipping, a second
  /// parent, a middle level and data parallelism (see `check`'s messages).
  void check(const MethodContext& context) const override;

  /// What the latest `apply` did.
  struct Stats {
    int64_t steps = 0;        ///< K: inner steps differentiated through
    int64_t snapshots = 0;    ///< binomial: slots besides the start; none: K - 1
    int64_t advances = 0;     ///< plain forward steps recomputed (without the K reverse steps)
    int64_t max_stored = 0;   ///< most inner states stored at once (with the start)
    int64_t state_bytes = 0;  ///< bytes of one inner state
  };
  /// The `Stats` of the latest `apply` (all zero before the first).
  const Stats& last_stats() const { return stats_; }
  /// Inner steps recorded since the latest unroll start.
  int64_t recorded_steps() const;

  /// The options it was built with.
  const UnrolledOptions& options() const { return options_; }

 private:
  struct Recording;
  UnrolledOptions options_;
  std::unique_ptr<Recording> recording_;
  Stats stats_;
  bool final_checked_ = false;  // the replay's end was compared with the weights (first apply)
};

}  // namespace hypergrad
}  // namespace mlo
