#pragma once
/// \file
/// `mlo::hypergrad::Sama`: the scalable meta-learning hypergradient (SAMA).
///
/// Paper: S. K. Choe, S. V. Mehta, H. Ahn, W. Neiswanger, P. Xie, E. Strubell, E. Xing,
/// "Making Scalable Meta Learning Practical", NeurIPS 2023 (arXiv:2310.05674), Sec. 3.

#include <mlo/core/method.h>
#include <mlo/hypergrad/forward_mode.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <memory>
#include <vector>

namespace mlo {

/// SAMA: eps = alpha / ||J v||; result (grad_lambda L(w - eps J v) - grad_lambda L(w + eps J v))
/// / 2eps, J = the lower optimizer's Jacobian of its update with respect to the gradient.
struct SamaOptions : MethodOptionsFor<SamaOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "sama";
  /// Perturbation size, relative to ||J v||.
  TORCH_ARG(double, alpha) = 0.01;
  /// How the mixed product along J v is taken: `kFiniteDifference` (the default), `kJvp`
  /// (exact, in forward mode, no eps; `alpha` is then not used) or `kAuto`, as for darts.
  TORCH_ARG(MixedMode, mode) = MixedMode::kFiniteDifference;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// The keys of the `sama:` section of a problem.
  void visit(Fields& fields) override;
  std::unique_ptr<Hypergradient> make() const override;
  /// A finite difference: its re-evaluations need gradients for the upper problems only.
  /// (w restored from a copy; jvp keeps none: the direction rides on w as its tangent)
  Reevaluation reevaluation() const override {
    return {true, mode() == MixedMode::kJvp ? 0 : 1};
  }
};

namespace hypergrad {

class DifferentiableOptimizer;

/// SAMA treats the lower level as the fixed point of its optimizer's update u(g) and, with the
/// base Jacobian (the Hessian) approximated by the identity, keeps only the optimizer's own
/// ("algorithmic") Jacobian J = du/dg:
///
///   dw*/dlambda ~ -J (d^2 L / dw dlambda),   result = -(d^2 L / dlambda dw) J v,
///
/// evaluated like DARTS by a central finite difference along J v (two first-order gradient
/// evaluations, no second-order graph). J is diagonal and read from the real optimizer:
///
/// - SGD: J = lr * c, c = 1 without momentum; with momentum mu and dampening d, c = 1 - d
///   (c = 1 on the step that created the buffer); Nesterov: c = 1 + mu (1 - d).
/// - Adam/AdamW (bias-corrected, eps, amsgrad), from the state after the latest step (m, v,
///   step t) and the gradient g that step used:
///   D = sqrt(v) / sqrt(1 - beta2^t) + eps,   c = sqrt(1 - beta2^t),
///   J = lr / (1 - beta1^t) * [(1 - beta1) / D - m (1 - beta2) g / (D^2 c sqrt(v))].
///
/// The gradient g is recorded just before each optimizer step of the lower problem (the method
/// is told through `before_optimizer_step`). Any other optimizer is refused at engine
/// initialization. Options: `SamaOptions::alpha`, `SamaOptions::mode`: with mode jvp the mixed
/// product along J v is exact, taken in forward mode as darts takes it (`negative_mixed`).
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().method(
///     mlo::SamaOptions().alpha(0.01)));
/// ```
class Sama : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit Sama(SamaOptions options);
  ~Sama() override;

  /// See the class comment; `v` over `curr`'s trainable parameters, result over `prev`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;
  /// Records the gradient the optimizer is about to use (for Adam's Jacobian).
  void before_optimizer_step(Level& curr) override;
  /// Refuses an optimizer other than SGD, Adam or AdamW, a data-parallel level under
  /// zero1/zero2 (the preconditioner reads every parameter's optimizer state; under zero3 a
  /// Chain's rank holds the state of its own shards, all that it reads there), and mode jvp on
  /// a level that shards its parameters (zero3).
  void check(const MethodContext& context) const override;
  /// The latest step's gradients, learning rates and buffer creation (read by the next apply).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  /// J v: `v` preconditioned by the lower optimizer's Jacobian (one tensor per parameter).
  std::vector<at::Tensor> precondition(const std::vector<at::Tensor>& v, Level& curr) const;

  /// Under mode jvp or auto, "jvp_fell_back" (1: the finite difference took the mixed
  /// product); under the finite difference, nothing.
  Metrics diagnostics() const override {
    if (options_.mode() == MixedMode::kFiniteDifference) return {};
    return {{"jvp_fell_back", route_.fallen_back ? 1.0 : 0.0}};
  }

  /// The options it was built with.
  const SamaOptions& options() const { return options_; }

 private:
  SamaOptions options_;
  // Recorded at the latest optimizer step of the lower problem.
  std::vector<at::Tensor> last_grads_;  // the gradient the update used (Adam/AdamW)
  std::vector<double> last_lrs_;  // the learning rates the latest step used (pre-schedule)
  std::vector<bool> created_buffer_;    // SGD: that step created the momentum buffer
  ForwardRoute route_;                  // jvp taken, or given up under mode auto
};

}  // namespace hypergrad
}  // namespace mlo
