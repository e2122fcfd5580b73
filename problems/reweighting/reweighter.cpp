// The upper level of data reweighting (Reweighter, problems/reweighting/reweighting.h): a weight
// net or a learned loss's logit terms, trained on the balanced meta set.
#include "problems/reweighting/reweighting.h"

#include "problems/reweighting/class_mwn.h"
#include "problems/reweighting/learned_loss.h"
#include "problems/reweighting/losses.h"

#include <mlo/base/error.h>
#include <mlo/nn/mwn.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <utility>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

// The losses at which the learned curve is recorded ("curve/l=<x>").
constexpr double kCurveLosses[] = {0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0};

std::string curve_name(const std::string& prefix, double loss) {
  char name[48];
  std::snprintf(name, sizeof(name), "curve/%sl=%g", prefix.c_str(), loss);
  return name;
}

}  // namespace

std::vector<std::string> Reweighter::headline_metrics() const {
  auto names = Problem::headline_metrics();
  names.push_back("meta_grad_norm");
  return names;
}

at::Tensor Reweighter::training_step(const Batch& batch) {
  const at::Tensor out = classifier->logits(batch.data);
  log_metric("acc", accuracy(out.detach(), batch.target));
  return per_sample_cross_entropy(out, batch.target).mean();
}

LogitTermsImpl* Reweighter::logit_terms() { return dynamic_cast<LogitTermsImpl*>(&module()); }

at::Tensor Reweighter::weights(const at::Tensor& losses, const at::Tensor& targets) {
  MLO_CHECK(has_weight_net(), "problem '", name(),
            "': its module is a learned loss's logit terms, not a weight net: pair it with "
            "LearnedLossOptions, not WeightNetOptions");
  const at::Tensor column = widened(losses).unsqueeze(1);
  if (auto* net = dynamic_cast<ClassMWNImpl*>(&module())) {
    return net->forward(column, targets).squeeze(1);
  }
  return module_as<nn::MWNImpl>()->forward(column).squeeze(1);
}

void Reweighter::grad_callback(std::vector<at::Tensor>& grads) {
  double norm2 = 0;
  for (const auto& g : grads) {
    if (g.defined()) norm2 += g.pow(2).sum(at::kDouble).item<double>();
  }
  log_metric("meta_grad_norm", std::sqrt(norm2));
}

void Reweighter::param_callback() {
  torch::NoGradGuard no_grad;
  const auto params = parameters();
  if (params.empty()) return;
  if (LogitTermsImpl* terms = logit_terms()) {
    const at::Tensor scale = terms->log_scale.exp().to(at::kDouble);
    const at::Tensor shift = terms->shift.to(at::kDouble);
    const at::Tensor weight =
        terms->has_class_weights() ? terms->log_weight.exp().to(at::kDouble) : at::Tensor();
    for (int64_t k = 0; k < scale.size(0); ++k) {
      log_metric("scale/" + std::to_string(k), scale[k].item<double>());
      log_metric("shift/" + std::to_string(k), shift[k].item<double>());
      if (weight.defined()) log_metric("cweight/" + std::to_string(k), weight[k].item<double>());
    }
    return;
  }
  const auto options = params.front().options().requires_grad(false);
  std::vector<double> grid(std::begin(kCurveLosses), std::end(kCurveLosses));
  const at::Tensor losses = torch::tensor(grid, options.dtype(at::kDouble)).to(options);
  if (auto* net = dynamic_cast<ClassMWNImpl*>(&module())) {
    const at::Tensor freq = net->log_frequency;
    const int64_t rare = freq.argmin().item<int64_t>(), frequent = freq.argmax().item<int64_t>();
    for (const auto& [prefix, cls] : {std::pair<std::string, int64_t>{"rare/", rare},
                                      std::pair<std::string, int64_t>{"frequent/", frequent}}) {
      const at::Tensor w =
          weights(losses, torch::full({losses.size(0)}, cls, losses.options().dtype(at::kLong)))
              .to(at::kDouble);
      for (size_t i = 0; i < grid.size(); ++i) {
        log_metric(curve_name(prefix, grid[i]), w[static_cast<int64_t>(i)].item<double>());
      }
    }
    return;
  }
  const at::Tensor w = weights(losses, {}).to(at::kDouble);
  for (size_t i = 0; i < grid.size(); ++i) {
    log_metric(curve_name("", grid[i]), w[static_cast<int64_t>(i)].item<double>());
  }
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
