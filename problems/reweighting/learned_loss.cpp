#include "problems/reweighting/learned_loss.h"

#include "problems/reweighting/class_priors.h"

#include <mlo/base/error.h>

#include <torch/torch.h>

#include <cmath>

namespace mlo {
namespace problems {
namespace reweighting {

LogitTermsImpl::LogitTermsImpl(const std::vector<int64_t>& train_counts, double init_tau,
                               bool class_weights) {
  MLO_CHECK(!train_counts.empty(), "learned loss: no classes");
  for (const int64_t n : train_counts) {
    MLO_CHECK(n > 0, "learned loss: every class needs a training sample, got a count of ", n);
  }
  MLO_CHECK(init_tau >= 0 && std::isfinite(init_tau),
            "learned loss: init_tau must be finite and >= 0, got ", init_tau);
  const auto classes = static_cast<int64_t>(train_counts.size());
  log_scale = register_parameter("log_scale", torch::zeros({classes}));
  shift = register_parameter("shift", (log_class_prior(train_counts) * init_tau).to(at::kFloat));
  if (class_weights) log_weight = register_parameter("log_weight", torch::zeros({classes}));
}

at::Tensor LogitTermsImpl::forward(const at::Tensor& logits) const {
  const auto type = logits.scalar_type();
  return logits * log_scale.to(type).exp() + shift.to(type);
}

at::Tensor LogitTermsImpl::weights(const at::Tensor& targets) const {
  if (!has_class_weights()) return torch::ones({targets.size(0)}, log_scale.options());
  return log_weight.exp().index_select(0, targets);
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
