#include "problems/reweighting/l2rw.h"

#include <mlo/base/error.h>
#include <mlo/memory/precision.h>

#include <torch/torch.h>

#include <cmath>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

at::Tensor per_sample_ce(const at::Tensor& logits, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(
      logits.to(logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat), target,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
}

}  // namespace

at::Tensor l2rw_weights(const std::function<at::Tensor(const at::Tensor&)>& logits,
                        const std::vector<at::Tensor>& params, const Batch& train,
                        const Batch& meta, double alpha, const Problem* owner) {
  MLO_CHECK(alpha > 0, "l2rw: alpha must be > 0, got ", alpha);
  // NOTE: under bf16/fp16 the look-ahead runs inside the classifier's autocast region; cached
  // weight casts would hide the perturbations below (memory/precision.h).
  memory::CastCacheOff no_cache;
  at::AutoGradMode enable_grad(true);
  const at::Tensor meta_loss = per_sample_ce(logits(meta.data), meta.target).mean();
  const auto v = torch::autograd::grad({meta_loss}, params, {}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
  double norm2 = 0;
  if (owner != nullptr) {
    norm2 = squared_norm(*owner, v);
  } else {
    for (const auto& t : v) {
      if (t.defined()) norm2 += t.pow(2).sum(at::kDouble).item<double>();
    }
  }
  const int64_t n = train.data.size(0);
  MLO_CHECK(std::isfinite(norm2), "l2rw: the meta gradient is not finite (meta loss ",
            meta_loss.item<double>(), "); the classifier diverged: lower its learning rate");
  if (!(norm2 > 0)) return torch::zeros({n}, train.data.options().dtype(at::kFloat));
  const double h = alpha / std::sqrt(norm2);

  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> saved;
  for (const auto& p : params) saved.push_back(p.detach().clone());
  auto shifted_losses = [&](double step) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(saved[i]);
      if (v[i].defined()) params[i].add_(v[i], step);
    }
    return per_sample_ce(logits(train.data), train.target);
  };
  at::Tensor plus, minus;
  try {
    plus = shifted_losses(h);
    minus = shifted_losses(-h);
  } catch (...) {
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
    throw;
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
  const at::Tensor u = ((plus - minus) / (2 * h)).clamp_min(0);
  // clamp_min keeps a nan, which would make every weight nan from here on.
  MLO_CHECK(torch::isfinite(u).all().item<bool>(),
            "l2rw: a look-ahead loss is not finite (the classifier diverged at distance ", h,
            " along the meta gradient); lower the classifier's learning rate or l2rw's alpha");
  const double total = u.sum(at::kDouble).item<double>();
  return total > 0 ? u / total : u;
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
