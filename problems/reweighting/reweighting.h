#pragma once
/// \file
/// Data reweighting (bilevel), three methods (`reweighting.method` in YAML), a learned loss
/// (learned_loss.h), and one-level baselines (class_balanced, logit_adjusted: class_priors.h;
/// focal: schemes/focal.cpp):
///
///   lower (Classifier):  min_w  sum_i w_i l_i(w) / Z        l_i = per-sample cross-entropy
///   upper (Reweighter):  min_phi  CE(meta set; w*(phi))     phi = the weight net's parameters
///
/// - mwn (Meta-Weight-Net, Shu et al. 2019): w_i = MWN_phi(l_i);
/// - class_mwn (class-aware, in the spirit of CMW-Net, Shu et al. 2023):
///   w_i = CMWN_phi(l_i, n_{y_i}) (problems/reweighting/class_mwn.h);
/// - l2rw (Learning to Reweight, Ren et al. 2018): no weight net and no upper problem; the
///   classifier computes its weights from a one-step look-ahead on a meta batch
///   (problems/reweighting/l2rw.h).
///
/// The classifier's weighting is an object implementing `Weighting` (its checks and its loss):
/// `PlainOptions` (the baseline, the plain mean loss), `WeightNetOptions` (mwn, class_mwn: the
/// reweighter's weights), `L2rwOptions` (l2rw: the meta batches and the look-ahead's step), one
/// of the two one-level long-tail baselines (class_priors.h): `ClassWeightOptions`
/// (class-balanced cross-entropy) and `LogitAdjustmentOptions` (logit adjustment), or
/// `LearnedLossOptions` (the learned loss: the reweighter's per-class logit terms). A scheme of
/// one's own implements `Weighting` too (scheme.h), without changing `Classifier`.
///
/// The weight net's input is the *detached* per-sample loss: the classifier's gradient is the
/// weighted gradient, and phi enters the lower loss only through the weights. With
/// `WeightNetOptions::freeze_inputs` (the default) the weight net's input is also frozen at the
/// losses of the classifier's own step (`Problem::step_value`): re-evaluations of the lower loss
/// inside a hypergradient (DARTS at w +- eps v, Neumann/CG at the current w) read the same
/// inputs the step used, so every method differentiates the update that was taken, as
/// Meta-Weight-Net does (docs/reweighting.md).

#include <mlo/core/problem.h>

#include <torch/arg.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {

class Classifier;
class Reweighter;
class LogitTermsImpl;

/// How the classifier weights its samples: the training loss of a batch. Set on a classifier
/// with `Classifier::weighting`, which calls `check` once and then keeps it. A scheme of one's
/// own derives from `Weighting` itself: a type derived from a built-in options struct would be
/// sliced back to the struct by the struct's setters (they return the struct).
class Weighting {
 public:
  virtual ~Weighting() = default;
  /// Throws `mlo::Error` naming `classifier` for options it cannot train with; by default none.
  virtual void check(const Classifier& classifier) const { (void)classifier; }
  /// The classifier's training loss on `batch` (`Classifier::training_step`); records "acc"
  /// and, with per-sample weights, the weight metrics (`Classifier::record_weights`).
  virtual at::Tensor loss(Classifier& classifier, const Batch& batch) const = 0;
  /// `Problem::separable_reevaluation` of a classifier with this weighting; by default false.
  virtual bool separable_reevaluation() const { return false; }

 protected:
  /// `Problem::step_value` of `classifier`: a value fixed at its own step on `batch`.
  static at::Tensor step_value(Classifier& classifier, const Batch& batch, const std::string& key,
                               const at::Tensor& value);
};

/// Plain training: every sample weighs the same, the loss is the mean cross-entropy (the
/// baseline).
struct PlainOptions : Weighting {
  at::Tensor loss(Classifier& classifier, const Batch& batch) const override;
};

/// Weights from the weight net of the level above (mwn, class_mwn): w_i = reweighter(l_i, y_i),
/// on the detached per-sample losses.
///
/// ```
/// classifier->weighting(WeightNetOptions(reweighter.get()).normalize(false));
/// ```
struct WeightNetOptions : Weighting {
  /// `reweighter`: the upper problem (a non-owning handle; it must not be null).
  explicit WeightNetOptions(Reweighter* reweighter) : reweighter_(reweighter) {}
  /// The level above, whose module computes the weights.
  Reweighter* reweighter() const { return reweighter_; }
  /// Divide by the batch's total weight instead of its size: sum_i w_i l_i / sum_i w_i. Only the
  /// relative weights then matter, so the reweighter cannot shrink every weight towards zero (in
  /// effect a smaller learning rate).
  TORCH_ARG(bool, normalize) = true;
  /// Freeze the weight net's input at the losses of the classifier's own step (see the file
  /// comment); false re-reads the losses at whatever weights the loss is evaluated (DARTS then
  /// also differentiates through the weight net's input: l_i d^2 w_i/(dphi dl) (grad l_i . v)).
  TORCH_ARG(bool, freeze_inputs) = true;
  /// Cap on a sample's weight relative to the batch's mean weight before the cap:
  /// w_i <- min(w_i, R mean_j w_j), the mean held constant (a capped sample passes no gradient to
  /// the weight net). Capping lowers the mean, so max w / mean w after the cap can exceed R when
  /// most weights are small; `weight_floor` is the bound that holds. 0: no cap; otherwise >= 1.
  TORCH_ARG(double, max_relative_weight) = 0.0;
  /// Floor under every weight: w_i <- f + (1 - f) w_i for a weight net's w_i in (0, 1), so the
  /// largest weight is at most 1/f times the smallest (under normalization, max_i w_i / mean_j w_j
  /// <= 1/f) while every sample keeps a gradient to the weight net. In [0, 1); 0: no floor.
  TORCH_ARG(double, weight_floor) = 0.0;
  /// The floor applies only after the classifier's first `weight_floor_after` local steps (its
  /// own steps and their re-evaluations alike, so a hypergradient sees the loss its step took:
  /// each batch of an accumulation window or an unrolled replay is re-evaluated with the floor
  /// its own step took, also after a resume from a state saved since then); before, the
  /// weights are the net's own. Early on a floor
  /// squeezes the weights together faster than the net learns to spread them; later it stops
  /// the sharpening that long runs build up (docs/reweighting.md, "The weight floor"). >= 0; 0:
  /// from the first step.
  TORCH_ARG(int64_t, weight_floor_after) = 0;
  /// Added to the logits in the classifier's training loss (and so in the losses the weight net
  /// reads), as logit adjustment does: `tau log(prior)` [C] (class_priors.h); the meta loss and
  /// predictions use the plain logits. Undefined (the default): none.
  TORCH_ARG(at::Tensor, logit_shift);

  void check(const Classifier& classifier) const override;
  at::Tensor loss(Classifier& classifier, const Batch& batch) const override;
  /// true on frozen inputs (`freeze_inputs`): see `Classifier::separable_reevaluation`.
  bool separable_reevaluation() const override { return freeze_inputs(); }

 private:
  Reweighter* reweighter_;
};

/// Fixed weights by class: w_i = c_{y_i} (class-balanced cross-entropy; the weights come from
/// `class_balanced_weights`, class_priors.h). No weight net and no upper problem.
///
/// ```
/// classifier->weighting(ClassWeightOptions(class_balanced_weights(counts, 0.999)));
/// ```
struct ClassWeightOptions : Weighting {
  /// `class_weights`: [C], finite, >= 0, with a positive sum.
  explicit ClassWeightOptions(at::Tensor class_weights)
      : class_weights_(std::move(class_weights)) {}
  /// The weight of each class.
  TORCH_ARG(at::Tensor, class_weights);
  /// As `WeightNetOptions::normalize`: sum_i w_i l_i / sum_i w_i (true) or mean_i w_i l_i.
  TORCH_ARG(bool, normalize) = true;

  void check(const Classifier& classifier) const override;
  at::Tensor loss(Classifier& classifier, const Batch& batch) const override;
};

/// Logit adjustment (class_priors.h): the loss is the mean of CE(f(x_i) + tau log pi, y_i), and
/// the classifier's logits (its predictions) stay f(x). No weight net and no upper problem.
///
/// ```
/// classifier->weighting(LogitAdjustmentOptions(log_class_prior(counts)).tau(1.0));
/// ```
struct LogitAdjustmentOptions : Weighting {
  /// `log_prior`: [C], finite (log_class_prior).
  explicit LogitAdjustmentOptions(at::Tensor log_prior) : log_prior_(std::move(log_prior)) {}
  /// log pi_c of each class.
  TORCH_ARG(at::Tensor, log_prior);
  /// The adjustment's scale; >= 0 (0: plain cross-entropy).
  TORCH_ARG(double, tau) = 1.0;

  void check(const Classifier& classifier) const override;
  at::Tensor loss(Classifier& classifier, const Batch& batch) const override;
};

/// Learning to Reweight (l2rw.h): no weight net and no upper problem; every call of the loss
/// draws a meta batch and weights the samples by the one-step look-ahead on it. The weights are
/// normalized by definition.
///
/// ```
/// classifier->weighting(L2rwOptions([stream] { return stream->next(); }).alpha(0.01));
/// ```
struct L2rwOptions : Weighting {
  /// `meta`: where the meta batches come from (it must not be empty).
  explicit L2rwOptions(std::function<Batch()> meta) : meta_(std::move(meta)) {}
  /// The meta batches.
  TORCH_ARG(std::function<Batch()>, meta);
  /// The finite-difference step relative to |v| (l2rw.h); > 0.
  TORCH_ARG(double, alpha) = 0.01;

  void check(const Classifier& classifier) const override;
  at::Tensor loss(Classifier& classifier, const Batch& batch) const override;
};

/// A learned loss (learned_loss.h): the classifier trains on the cross-entropy of its logits
/// through the reweighter's per-class logit terms (and class weights, when it has them), which
/// the reweighter learns on the meta set; predictions use the plain logits.
///
/// ```
/// reweighter->module(LogitTerms(counts, 1.0, false));
/// classifier->weighting(LearnedLossOptions(reweighter.get()));
/// ```
struct LearnedLossOptions : Weighting {
  /// `reweighter`: the upper problem, whose module is a `LogitTerms` (a non-owning handle; it
  /// must not be null).
  explicit LearnedLossOptions(Reweighter* reweighter) : reweighter_(reweighter) {}
  /// The level above, whose module holds the terms.
  Reweighter* reweighter() const { return reweighter_; }
  /// With class weights: sum_i c_i l_i / sum_i c_i (true) or mean_i c_i l_i (false).
  TORCH_ARG(bool, normalize) = true;

  void check(const Classifier& classifier) const override;
  at::Tensor loss(Classifier& classifier, const Batch& batch) const override;

 private:
  Reweighter* reweighter_;
};

namespace detail {
/// Enables an overload for a `Weighting` type `W`.
template <typename W>
using IfWeighting = std::enable_if_t<std::is_base_of<Weighting, std::decay_t<W>>::value &&
                                     !std::is_abstract<std::decay_t<W>>::value>;
}  // namespace detail

/// Lower level: a classifier whose module is an `mlo::nn::Chain` producing logits.
class Classifier : public Problem {
 public:
  /// A classifier named `name`, trained on the plain mean loss (`PlainOptions`) until
  /// `weighting` sets another.
  explicit Classifier(std::string name, ProblemConfig config = ProblemConfig());
  /// A classifier named `name` weighting its samples by `weighting` (a `Weighting`), checked as
  /// by `weighting(...)`.
  template <typename W, typename = detail::IfWeighting<W>>
  Classifier(std::string name, ProblemConfig config, W&& weighting)
      : Classifier(std::move(name), std::move(config)) {
    this->weighting(std::forward<W>(weighting));
  }
  /// Replaces the weighting by a copy of `weighting` (a `Weighting`, e.g. `WeightNetOptions`),
  /// after its `check` (the built-in options throw `mlo::Error` for a null reweighter, a
  /// max_relative_weight in (0, 1) or negative, a weight_floor outside [0, 1), a negative
  /// weight_floor_after, an empty meta-batch function, alpha <= 0, class weights that are not
  /// a finite non-negative vector with a positive sum, a log prior that is not a finite vector
  /// or tau < 0); e.g. once the reweighter exists (it refers back to the classifier).
  template <typename W, typename = detail::IfWeighting<W>>
  Classifier& weighting(W&& weighting) {
    return this->weighting(std::make_shared<std::decay_t<W>>(std::forward<W>(weighting)));
  }
  /// Replaces the weighting by `weighting` (not null, shared, and not to be changed by its
  /// other owners afterwards), after its `check`.
  Classifier& weighting(std::shared_ptr<const Weighting> weighting);
  /// The weighting in use.
  const Weighting& weighting() const { return *weighting_; }
  /// The weighting in use as a `W`, or null when it is of another type.
  template <typename W>
  const W* weighting_as() const {
    return dynamic_cast<const W*>(weighting_.get());
  }
  /// Number of classes, for the per-class weight metrics ("wclass/<k>"; 0: none).
  int64_t num_classes = 0;
  /// The weighting's loss on `batch` (`Weighting::loss`). The built-in weightings record "acc"
  /// and, with weights, "weight_mean", "weight_std", "weight_min", "weight_max", "weight_peak" (max
  /// / mean: under normalized weights the largest per-sample step relative to uniform weights),
  /// "weight_ess" ((sum w)^2 / (N sum w^2), the effective sample size as a fraction of the
  /// batch), "wclass/<k>", the mean weight of the batch's class-k samples divided by the batch
  /// mean weight (1 = no preference; only classes in the batch), and, with a weight net,
  /// "weight_saturated" (the fraction of the net's own outputs, before a floor or a bound,
  /// below 0.01 or above 0.99, where its sigmoid passes less than 4% of its largest gradient).
  at::Tensor training_step(const Batch& batch) override;
  /// Records the weight metrics above for per-sample weights `w` [N] of class `target` [N].
  void record_weights(const at::Tensor& w, const at::Tensor& target);
  /// The default headline metrics and "weight_std" (the spread of the batch's weights).
  std::vector<std::string> headline_metrics() const override;
  /// Logits of the classifier for `x`.
  at::Tensor logits(const at::Tensor& x);

 protected:
  /// The weighting's (`Weighting::separable_reevaluation`): true with a weight net (mwn,
  /// class_mwn) on frozen inputs: the loss is a weighted mean (or normalized sum) of per-sample
  /// losses whose weights come from the reweighter and from the losses frozen at the
  /// classifier's step (`step_value`). Without frozen inputs a forward-mode re-evaluation throws
  /// `hypergrad::ForwardModeUnsupported` (the weights follow w through a stopped gradient:
  /// `mlo::stop_gradient`).
  bool separable_reevaluation() const override;

 private:
  friend class Weighting;  // step_value for the weightings

  std::shared_ptr<const Weighting> weighting_;
};

/// Upper level: the weight net (`mlo::nn::MWN`, or `ClassMWN` for class_mwn) or the learned
/// loss's logit terms (`LogitTerms`), trained on the balanced meta set. Records "acc",
/// "meta_grad_norm" (the norm of its hypergradient at each optimizer step) and, with a weight
/// net, the learned curve "curve/l=<x>" (the weight at loss x; for class_mwn "curve/rare/l=<x>"
/// and "curve/frequent/l=<x>" for the rarest and the largest class), with logit terms the
/// learned terms by class: "scale/<k>" (exp(a_k)), "shift/<k>" (b_k) and, with class weights,
/// "cweight/<k>" (exp(d_k)).
class Reweighter : public Problem {
 public:
  using Problem::Problem;
  /// The classifier whose meta loss this problem learns on (linked by the engine: the one
  /// Classifier).
  Handle<Classifier> classifier{this};
  /// Mean cross-entropy of the classifier on the meta batch; records "acc".
  at::Tensor training_step(const Batch& batch) override;
  /// The default headline metrics and "meta_grad_norm".
  std::vector<std::string> headline_metrics() const override;
  /// Per-sample weights [N] for per-sample losses [N] (pass them detached) of class `targets`
  /// (a weight net only).
  at::Tensor weights(const at::Tensor& losses, const at::Tensor& targets);
  /// The learned loss's terms, or null when the module is a weight net.
  LogitTermsImpl* logit_terms();
  /// Whether the module is a weight net (not logit terms).
  bool has_weight_net() { return logit_terms() == nullptr; }
  /// Records the hypergradient norm.
  void grad_callback(std::vector<at::Tensor>& grads) override;
  /// Records the learned curve.
  void param_callback() override;
};

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
