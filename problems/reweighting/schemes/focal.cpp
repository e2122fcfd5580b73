// `focal`: the focal loss (Lin et al. 2017, "Focal Loss for Dense Object Detection",
// arXiv:1708.02002), one level: sample i weighs (1 - p_i)^gamma, p_i the predicted probability
// of its class, so confidently right samples count less; the loss is mean_i (1 - p_i)^gamma l_i
// with the gradient through the factor, as in the paper. No weight net. gamma 0: cross-entropy.
#include "problems/reweighting/losses.h"
#include "problems/reweighting/scheme.h"

#include <mlo/base/number_text.h>

#include <torch/torch.h>

#include <cmath>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

struct FocalWeighting : Weighting {
  double gamma = 2.0;
  at::Tensor loss(Classifier& c, const Batch& batch) const override {
    const at::Tensor out = c.logits(batch.data);
    const at::Tensor losses = per_sample_cross_entropy(out, batch.target);
    c.log_metric("acc", accuracy(out.detach(), batch.target));
    // 1 - p_i = 1 - exp(-l_i), kept off 0 so that gamma < 1 has a finite gradient there.
    const at::Tensor w = (-torch::expm1(-losses)).clamp_min(1e-12).pow(gamma);
    c.record_weights(w, batch.target);
    return (w * losses).mean();
  }
};

struct FocalScheme : SchemeFor<FocalScheme> {
  static constexpr const char* kName = "focal";
  double gamma = 2.0;  // the focusing exponent; >= 0 (0: plain cross-entropy)
  void visit(Fields& f) override {
    f("gamma", gamma, [](const double& x) {
      return x >= 0 && std::isfinite(x)
                 ? std::string()
                 : "must be finite and >= 0 (0 = plain cross-entropy), got " + number_text(x);
    });
  }
  WeightNet weight_net() const override { return WeightNet::kNone; }
  std::string describe() const override { return "focal loss (gamma " + number_text(gamma) + ")"; }
  void apply(const SchemeContext& c) const override {
    FocalWeighting focal;
    focal.gamma = gamma;
    c.classifier.weighting(focal);
  }
};

}  // namespace

MLO_REGISTER_WEIGHTING(FocalScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
