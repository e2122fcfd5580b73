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

Classifier::Classifier(std::string name, ProblemConfig config, Weighting weighting)
    : Problem(std::move(name), std::move(config)) {
  this->weighting(std::move(weighting));
}

Classifier& Classifier::weighting(Weighting weighting) {
  if (const auto* o = std::get_if<WeightNetOptions>(&weighting)) {
    MLO_CHECK(o->reweighter() != nullptr, "problem '", name(),
              "': WeightNetOptions needs a reweighter, got null");
    MLO_CHECK(o->max_relative_weight() == 0 || o->max_relative_weight() >= 1, "problem '", name(),
              "': WeightNetOptions max_relative_weight must be 0 (no bound) or >= 1, got ",
              o->max_relative_weight());
    MLO_CHECK(o->weight_floor() >= 0 && o->weight_floor() < 1, "problem '", name(),
              "': WeightNetOptions weight_floor must be in [0, 1), got ", o->weight_floor());
    MLO_CHECK(o->weight_floor_after() >= 0, "problem '", name(),
              "': WeightNetOptions weight_floor_after must be >= 0, got ", o->weight_floor_after());
    const at::Tensor& shift = o->logit_shift();
    MLO_CHECK(!shift.defined() || (shift.dim() == 1 && shift.numel() > 0 &&
                                   shift.detach().isfinite().all().item<bool>()),
              "problem '", name(), "': WeightNetOptions logit_shift must be a finite vector");
  } else if (const auto* o = std::get_if<LearnedLossOptions>(&weighting)) {
    MLO_CHECK(o->reweighter() != nullptr, "problem '", name(),
              "': LearnedLossOptions needs a reweighter, got null");
  } else if (const auto* o = std::get_if<L2rwOptions>(&weighting)) {
    MLO_CHECK(static_cast<bool>(o->meta()), "problem '", name(),
              "': L2rwOptions needs a meta-batch function, got an empty one");
    MLO_CHECK(o->alpha() > 0, "problem '", name(), "': L2rwOptions alpha must be > 0, got ",
              o->alpha());
  } else if (const auto* o = std::get_if<ClassWeightOptions>(&weighting)) {
    const at::Tensor& w = o->class_weights();
    MLO_CHECK(w.defined() && w.dim() == 1 && w.numel() > 0, "problem '", name(),
              "': ClassWeightOptions needs a vector of class weights");
    const at::Tensor d = w.detach().to(at::kDouble);
    MLO_CHECK(d.isfinite().all().item<bool>() && d.ge(0).all().item<bool>() &&
                  d.sum().item<double>() > 0,
              "problem '", name(),
              "': ClassWeightOptions class weights must be finite, >= 0 and not all 0, got ",
              d);
  } else if (const auto* o = std::get_if<LogitAdjustmentOptions>(&weighting)) {
    const at::Tensor& p = o->log_prior();
    MLO_CHECK(p.defined() && p.dim() == 1 && p.numel() > 0 &&
                  p.detach().isfinite().all().item<bool>(),
              "problem '", name(), "': LogitAdjustmentOptions needs a finite vector log prior");
    MLO_CHECK(o->tau() >= 0 && std::isfinite(o->tau()), "problem '", name(),
              "': LogitAdjustmentOptions tau must be >= 0, got ", o->tau());
  }
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

at::Tensor Classifier::training_step(const Batch& batch) {
  if (const auto* o = std::get_if<WeightNetOptions>(&weighting_)) return weight_net_loss(batch, *o);
  if (const auto* o = std::get_if<L2rwOptions>(&weighting_)) return l2rw_loss(batch, *o);
  if (const auto* o = std::get_if<ClassWeightOptions>(&weighting_)) {
    return class_weight_loss(batch, *o);
  }
  if (const auto* o = std::get_if<LogitAdjustmentOptions>(&weighting_)) {
    return logit_adjusted_loss(batch, *o);
  }
  if (const auto* o = std::get_if<LearnedLossOptions>(&weighting_)) return learned_loss(batch, *o);
  return plain_loss(batch);
}

bool Classifier::separable_reevaluation() const {
  const auto* o = std::get_if<WeightNetOptions>(&weighting_);
  return o != nullptr && o->freeze_inputs();
}

at::Tensor Classifier::class_weight_loss(const Batch& batch, const ClassWeightOptions& options) {
  const at::Tensor out = logits(batch.data);
  const at::Tensor losses = per_sample_cross_entropy(out, batch.target);
  MLO_CHECK(out.size(1) == options.class_weights().size(0), "problem '", name(), "': ",
            options.class_weights().size(0), " class weights for ", out.size(1), " logits");
  log_metric("acc", accuracy(out.detach(), batch.target));
  const at::Tensor w = options.class_weights()
                           .to(losses.device(), losses.scalar_type())
                           .index_select(0, batch.target);
  record_weights(w, batch.target);
  if (options.normalize()) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

at::Tensor Classifier::logit_adjusted_loss(const Batch& batch,
                                           const LogitAdjustmentOptions& options) {
  const at::Tensor out = logits(batch.data);
  MLO_CHECK(out.size(1) == options.log_prior().size(0), "problem '", name(), "': a log prior of ",
            options.log_prior().size(0), " classes for ", out.size(1), " logits");
  log_metric("acc", accuracy(out.detach(), batch.target));
  const at::Tensor wide = widened(out);
  const at::Tensor shift =
      options.log_prior().to(wide.device(), wide.scalar_type()) * options.tau();
  return per_sample_cross_entropy(wide + shift, batch.target).mean();
}

at::Tensor Classifier::learned_loss(const Batch& batch, const LearnedLossOptions& options) {
  LogitTermsImpl* terms = options.reweighter()->logit_terms();
  MLO_CHECK(terms != nullptr, "problem '", name(), "': LearnedLossOptions needs a reweighter ",
            "whose module is LogitTerms, got '", options.reweighter()->module().name(), "'");
  const at::Tensor out = logits(batch.data);
  log_metric("acc", accuracy(out.detach(), batch.target));
  MLO_CHECK(out.size(1) == terms->log_scale.size(0), "problem '", name(), "': logit terms of ",
            terms->log_scale.size(0), " classes for ", out.size(1), " logits");
  const at::Tensor losses = per_sample_cross_entropy(terms->forward(widened(out)), batch.target);
  if (!terms->has_class_weights()) return losses.mean();
  const at::Tensor w = terms->weights(batch.target).to(losses.scalar_type());
  record_weights(w, batch.target);
  if (options.normalize()) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

at::Tensor Classifier::plain_loss(const Batch& batch) {
  const at::Tensor out = logits(batch.data);
  log_metric("acc", accuracy(out.detach(), batch.target));
  return per_sample_cross_entropy(out, batch.target).mean();
}

at::Tensor Classifier::l2rw_loss(const Batch& batch, const L2rwOptions& options) {
  // Learning to Reweight: weights from the look-ahead on a meta batch, at the current weights.
  at::Tensor w;
  {
    // The look-ahead's forwards must leave batch-norm statistics as they were.
    std::vector<at::Tensor> buffers, saved;
    for (const auto& b : module().buffers()) {
      buffers.push_back(b);
      saved.push_back(b.detach().clone());
    }
    w = l2rw_weights([this](const at::Tensor& x) { return logits(x); }, parameters(), batch,
                     options.meta()().to(device()), options.alpha(), this);
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].detach().copy_(saved[i]);
  }
  const at::Tensor out = logits(batch.data);
  const at::Tensor losses = per_sample_cross_entropy(out, batch.target);
  log_metric("acc", accuracy(out.detach(), batch.target));
  record_weights(w, batch.target);
  return (w.to(losses.scalar_type()) * losses).sum();
}

at::Tensor Classifier::weight_net_loss(const Batch& batch, const WeightNetOptions& options) {
  Reweighter& reweighter = *options.reweighter();
  // The floor of this step's number (step_count() from the step's start to the next step); the
  // batch's later evaluations (the rest of an accumulation window, an unrolled replay) keep it.
  const double floor =
      step_value(batch, "weight_floor",
                 torch::tensor(options.weight_floor_after() == 0 ||
                                       step_count() > options.weight_floor_after()
                                   ? options.weight_floor()
                                   : 0.0,
                               torch::kDouble))
          .item<double>();
  auto bounded = [&](at::Tensor w) {
    if (floor > 0) w = floor + (1 - floor) * w;
    if (options.max_relative_weight() <= 0) return w;
    return torch::minimum(w, w.mean().detach() * options.max_relative_weight());
  };
  const at::Tensor out = logits(batch.data);
  at::Tensor losses;
  if (!options.logit_shift().defined()) {
    losses = per_sample_cross_entropy(out, batch.target);
  } else {
    const at::Tensor wide = widened(out);
    MLO_CHECK(out.size(1) == options.logit_shift().size(0), "problem '", name(),
              "': a logit shift of ", options.logit_shift().size(0), " classes for ",
              out.size(1), " logits");
    losses = per_sample_cross_entropy(
        wide + options.logit_shift().to(wide.device(), wide.scalar_type()), batch.target);
  }
  log_metric("acc", accuracy(out.detach(), batch.target));
  // The weight net reads the per-sample losses as constants: frozen at the classifier's own
  // step, or (freeze_weight_inputs: false) at the parameters of each evaluation.
  const at::Tensor inputs = options.freeze_inputs()
                                ? step_value(batch, "losses", losses)
                                : stop_gradient(losses, "the weight net's inputs");
  const at::Tensor raw = reweighter.weights(inputs, batch.target);
  const at::Tensor w = bounded(raw);
  record_weights(w, batch.target);
  log_metric("weight_floor", floor);
  // (of the net's own output, before a floor or a bound)
  log_metric("weight_saturated",
             raw.detach().lt(0.01).logical_or(raw.detach().gt(0.99)).to(at::kDouble).mean()
                 .item<double>());
  if (options.normalize()) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
