#include "problems/reweighting/reweighting.h"

#include "problems/reweighting/class_mwn.h"
#include "problems/reweighting/l2rw.h"
#include "problems/reweighting/learned_loss.h"
#include "problems/reweighting/losses.h"

#include <mlo/core/config.h>
#include <mlo/core/stop_gradient.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/mwn.h>

#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace mlo {
namespace problems {
namespace reweighting {

at::Tensor Weighting::step_value(Classifier& classifier, const Batch& batch, const std::string& key,
                                 const at::Tensor& value) {
  return classifier.step_value(batch, key, value);
}

at::Tensor PlainOptions::loss(Classifier& c, const Batch& batch) const {
  const at::Tensor out = c.logits(batch.data);
  c.log_metric("acc", accuracy(out.detach(), batch.target));
  return per_sample_cross_entropy(out, batch.target).mean();
}

void WeightNetOptions::check(const Classifier& c) const {
  MLO_CHECK(reweighter() != nullptr, "problem '", c.name(),
            "': WeightNetOptions needs a reweighter, got null");
  MLO_CHECK(max_relative_weight() == 0 || max_relative_weight() >= 1, "problem '", c.name(),
            "': WeightNetOptions max_relative_weight must be 0 (no bound) or >= 1, got ",
            max_relative_weight());
  MLO_CHECK(weight_floor() >= 0 && weight_floor() < 1, "problem '", c.name(),
            "': WeightNetOptions weight_floor must be in [0, 1), got ", weight_floor());
  MLO_CHECK(weight_floor_after() >= 0, "problem '", c.name(),
            "': WeightNetOptions weight_floor_after must be >= 0, got ", weight_floor_after());
  const at::Tensor& shift = logit_shift();
  MLO_CHECK(!shift.defined() || (shift.dim() == 1 && shift.numel() > 0 &&
                                 shift.detach().isfinite().all().item<bool>()),
            "problem '", c.name(), "': WeightNetOptions logit_shift must be a finite vector");
}

void LearnedLossOptions::check(const Classifier& c) const {
  MLO_CHECK(reweighter() != nullptr, "problem '", c.name(),
            "': LearnedLossOptions needs a reweighter, got null");
}

void L2rwOptions::check(const Classifier& c) const {
  MLO_CHECK(static_cast<bool>(meta()), "problem '", c.name(),
            "': L2rwOptions needs a meta-batch function, got an empty one");
  MLO_CHECK(alpha() > 0, "problem '", c.name(), "': L2rwOptions alpha must be > 0, got ", alpha());
}

void ClassWeightOptions::check(const Classifier& c) const {
  const at::Tensor& w = class_weights();
  MLO_CHECK(w.defined() && w.dim() == 1 && w.numel() > 0, "problem '", c.name(),
            "': ClassWeightOptions needs a vector of class weights");
  const at::Tensor d = w.detach().to(at::kDouble);
  MLO_CHECK(
      d.isfinite().all().item<bool>() && d.ge(0).all().item<bool>() && d.sum().item<double>() > 0,
      "problem '", c.name(),
      "': ClassWeightOptions class weights must be finite, >= 0 and not all 0, got ", d);
}

void LogitAdjustmentOptions::check(const Classifier& c) const {
  const at::Tensor& p = log_prior();
  MLO_CHECK(
      p.defined() && p.dim() == 1 && p.numel() > 0 && p.detach().isfinite().all().item<bool>(),
      "problem '", c.name(), "': LogitAdjustmentOptions needs a finite vector log prior");
  MLO_CHECK(tau() >= 0 && std::isfinite(tau()), "problem '", c.name(),
            "': LogitAdjustmentOptions tau must be >= 0, got ", tau());
}

Classifier::Classifier(std::string name, ProblemConfig config)
    : Problem(std::move(name), std::move(config)),
      weighting_(std::make_shared<const PlainOptions>()) {}

Classifier& Classifier::weighting(std::shared_ptr<const Weighting> weighting) {
  MLO_CHECK(weighting != nullptr, "problem '", name(), "': the weighting must not be null");
  weighting->check(*this);
  weighting_ = std::move(weighting);
  forget_step_values("weight_floor");  // the floors the old options applied
  return *this;
}

std::vector<std::string> Classifier::headline_metrics() const {
  auto names = Problem::headline_metrics();
  names.push_back("weight_std");
  return names;
}

at::Tensor Classifier::logits(const at::Tensor& x) {
  return module_as<nn::ChainImpl>()->forward(x);
}

void Classifier::record_weights(const at::Tensor& weights, const at::Tensor& target) {
  const at::Tensor d = weights.detach().to(at::kDouble);
  const double mean = d.mean().item<double>();
  log_metric("weight_mean", mean);
  log_metric("weight_std", d.numel() > 1 ? d.std().item<double>() : 0.0);
  log_metric("weight_min", d.min().item<double>());
  const double max = d.max().item<double>();
  log_metric("weight_max", max);
  const double sum_sq = d.pow(2).sum().item<double>();
  if (mean > 0) log_metric("weight_peak", max / mean);
  if (sum_sq > 0) {
    log_metric("weight_ess", mean * mean * static_cast<double>(d.numel()) / sum_sq);
  }
  if (num_classes <= 0 || !(mean > 0)) return;
  const at::Tensor sums = torch::zeros({num_classes}, d.options()).index_add_(0, target, d);
  const at::Tensor counts =
      torch::zeros({num_classes}, d.options()).index_add_(0, target, torch::ones_like(d));
  for (int64_t c = 0; c < num_classes; ++c) {
    const double n = counts[c].item<double>();
    if (n > 0) log_metric("wclass/" + std::to_string(c), sums[c].item<double>() / n / mean);
  }
}

at::Tensor Classifier::training_step(const Batch& batch) { return weighting_->loss(*this, batch); }

bool Classifier::separable_reevaluation() const { return weighting_->separable_reevaluation(); }

at::Tensor ClassWeightOptions::loss(Classifier& c, const Batch& batch) const {
  const at::Tensor out = c.logits(batch.data);
  const at::Tensor losses = per_sample_cross_entropy(out, batch.target);
  MLO_CHECK(out.size(1) == class_weights().size(0), "problem '", c.name(),
            "': ", class_weights().size(0), " class weights for ", out.size(1), " logits");
  c.log_metric("acc", accuracy(out.detach(), batch.target));
  const at::Tensor w =
      class_weights().to(losses.device(), losses.scalar_type()).index_select(0, batch.target);
  c.record_weights(w, batch.target);
  if (normalize()) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

at::Tensor LogitAdjustmentOptions::loss(Classifier& c, const Batch& batch) const {
  const at::Tensor out = c.logits(batch.data);
  MLO_CHECK(out.size(1) == log_prior().size(0), "problem '", c.name(), "': a log prior of ",
            log_prior().size(0), " classes for ", out.size(1), " logits");
  c.log_metric("acc", accuracy(out.detach(), batch.target));
  const at::Tensor wide = widened(out);
  const at::Tensor shift = log_prior().to(wide.device(), wide.scalar_type()) * tau();
  return per_sample_cross_entropy(wide + shift, batch.target).mean();
}

at::Tensor LearnedLossOptions::loss(Classifier& c, const Batch& batch) const {
  LogitTermsImpl* terms = reweighter()->logit_terms();
  MLO_CHECK(terms != nullptr, "problem '", c.name(), "': LearnedLossOptions needs a reweighter ",
            "whose module is LogitTerms, got '", reweighter()->module().name(), "'");
  const at::Tensor out = c.logits(batch.data);
  c.log_metric("acc", accuracy(out.detach(), batch.target));
  MLO_CHECK(out.size(1) == terms->log_scale.size(0), "problem '", c.name(), "': logit terms of ",
            terms->log_scale.size(0), " classes for ", out.size(1), " logits");
  const at::Tensor losses = per_sample_cross_entropy(terms->forward(widened(out)), batch.target);
  if (!terms->has_class_weights()) return losses.mean();
  const at::Tensor w = terms->weights(batch.target).to(losses.scalar_type());
  c.record_weights(w, batch.target);
  if (normalize()) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

at::Tensor L2rwOptions::loss(Classifier& c, const Batch& batch) const {
  // Learning to Reweight: weights from the look-ahead on a meta batch, at the current weights.
  at::Tensor w;
  {
    // The look-ahead's forwards must leave batch-norm statistics as they were.
    std::vector<at::Tensor> buffers, saved;
    for (const auto& b : c.module().buffers()) {
      buffers.push_back(b);
      saved.push_back(b.detach().clone());
    }
    w = l2rw_weights([&c](const at::Tensor& x) { return c.logits(x); }, c.parameters(), batch,
                     meta()().to(c.device()), alpha(), &c);
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].detach().copy_(saved[i]);
  }
  const at::Tensor out = c.logits(batch.data);
  const at::Tensor losses = per_sample_cross_entropy(out, batch.target);
  c.log_metric("acc", accuracy(out.detach(), batch.target));
  c.record_weights(w, batch.target);
  return (w.to(losses.scalar_type()) * losses).sum();
}

at::Tensor WeightNetOptions::loss(Classifier& c, const Batch& batch) const {
  Reweighter& net = *reweighter();
  // The floor of this step's number (step_count() from the step's start to the next step); the
  // batch's later evaluations (the rest of an accumulation window, an unrolled replay) keep it.
  const double floor =
      step_value(c, batch, "weight_floor",
                 torch::tensor(weight_floor_after() == 0 || c.step_count() > weight_floor_after()
                                   ? weight_floor()
                                   : 0.0,
                               torch::kDouble))
          .item<double>();
  auto bounded = [&](at::Tensor w) {
    if (floor > 0) w = floor + (1 - floor) * w;
    if (max_relative_weight() <= 0) return w;
    return torch::minimum(w, w.mean().detach() * max_relative_weight());
  };
  const at::Tensor out = c.logits(batch.data);
  at::Tensor losses;
  if (!logit_shift().defined()) {
    losses = per_sample_cross_entropy(out, batch.target);
  } else {
    const at::Tensor wide = widened(out);
    MLO_CHECK(out.size(1) == logit_shift().size(0), "problem '", c.name(), "': a logit shift of ",
              logit_shift().size(0), " classes for ", out.size(1), " logits");
    losses = per_sample_cross_entropy(wide + logit_shift().to(wide.device(), wide.scalar_type()),
                                      batch.target);
  }
  c.log_metric("acc", accuracy(out.detach(), batch.target));
  // The weight net reads the per-sample losses as constants: frozen at the classifier's own
  // step, or (freeze_weight_inputs: false) at the parameters of each evaluation.
  const at::Tensor inputs = freeze_inputs() ? step_value(c, batch, "losses", losses)
                                            : stop_gradient(losses, "the weight net's inputs");
  const at::Tensor raw = net.weights(inputs, batch.target);
  const at::Tensor w = bounded(raw);
  c.record_weights(w, batch.target);
  c.log_metric("weight_floor", floor);
  // (of the net's own output, before a floor or a bound)
  c.log_metric("weight_saturated", raw.detach()
                                       .lt(0.01)
                                       .logical_or(raw.detach().gt(0.99))
                                       .to(at::kDouble)
                                       .mean()
                                       .item<double>());
  if (normalize()) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
