#include "problems/reweighting/reweighting.h"

#include <mlo/nn/chain.h>
#include <mlo/nn/mwn.h>

#include <torch/nn/functional/loss.h>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

namespace F = torch::nn::functional;

// Losses and weights are computed in at least float32: low-precision logits (bf16/fp16 under
// autocast) are widened, float64 models stay in float64.
at::Tensor widened(const at::Tensor& t) {
  const auto type = t.scalar_type();
  return type == at::kBFloat16 || type == at::kHalf ? t.to(at::kFloat) : t;
}

at::Tensor per_sample_cross_entropy(const at::Tensor& logits, const at::Tensor& target) {
  return F::cross_entropy(widened(logits), target,
                          F::CrossEntropyFuncOptions().reduction(torch::kNone));
}

double accuracy(const at::Tensor& logits, const at::Tensor& target) {
  return logits.argmax(1).eq(target).to(at::kFloat).mean().item<double>();
}

}  // namespace

at::Tensor Classifier::logits(const at::Tensor& x) {
  return module_as<nn::ChainImpl>()->forward(x);
}

at::Tensor Classifier::training_step(const Batch& batch) {
  const at::Tensor out = logits(batch.data);
  const at::Tensor losses = per_sample_cross_entropy(out, batch.target);
  log_metric("acc", accuracy(out.detach(), batch.target));
  if (!reweighter) return losses.mean();
  const at::Tensor w = reweighter->weights(losses.detach());
  {
    const at::Tensor d = w.detach();
    log_metric("weight_mean", d.mean().item<double>());
    log_metric("weight_std", d.numel() > 1 ? d.std().item<double>() : 0.0);
    log_metric("weight_min", d.min().item<double>());
    log_metric("weight_max", d.max().item<double>());
  }
  if (normalize_weights) return (w * losses).sum() / w.sum().clamp_min(1e-12);
  return (w * losses).mean();
}

at::Tensor Reweighter::training_step(const Batch& batch) {
  const at::Tensor out = classifier->logits(batch.data);
  log_metric("acc", accuracy(out.detach(), batch.target));
  return per_sample_cross_entropy(out, batch.target).mean();
}

at::Tensor Reweighter::weights(const at::Tensor& losses) {
  return module_as<nn::MWNImpl>()->forward(widened(losses).unsqueeze(1)).squeeze(1);
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
