#pragma once
// The per-sample losses and accuracy the reweighting problems share (reweighting.cpp,
// reweighter.cpp).

#include <ATen/core/Tensor.h>
#include <torch/nn/functional/loss.h>

namespace mlo {
namespace problems {
namespace reweighting {

/// Losses and weights are computed in at least float32: low-precision logits (bf16/fp16 under
/// autocast) are widened, float64 models stay in float64.
inline at::Tensor widened(const at::Tensor& t) {
  const auto type = t.scalar_type();
  return type == at::kBFloat16 || type == at::kHalf ? t.to(at::kFloat) : t;
}

/// Cross-entropy per sample [N] of logits [N, C] (widened).
inline at::Tensor per_sample_cross_entropy(const at::Tensor& logits, const at::Tensor& target) {
  namespace F = torch::nn::functional;
  const at::Tensor z = widened(logits);
  if (z._fw_grad(/*level=*/0).defined()) {
    // NOTE: logits with a forward-mode tangent (mlo/hypergrad/forward_mode.h): LibTorch has no
    // forward-mode formula for the fused kernel's backward (nll_loss_backward), which a
    // forward-over-reverse product differentiates; logsumexp minus the target's logit is the
    // same loss, and its backward operators have one.
    return at::logsumexp(z, 1) - z.gather(1, target.unsqueeze(1)).squeeze(1);
  }
  return F::cross_entropy(z, target, F::CrossEntropyFuncOptions().reduction(torch::kNone));
}

/// The fraction of rows of `logits` whose largest entry is at `target`.
inline double accuracy(const at::Tensor& logits, const at::Tensor& target) {
  return logits.argmax(1).eq(target).to(at::kFloat).mean().item<double>();
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
