// `logit_adjusted`: logit adjustment (Menon et al. 2021, class_priors.h), one level: training
// adds tau log(prior) to the logits; predictions use the plain logits; no weight net.
#include "problems/reweighting/class_priors.h"
#include "problems/reweighting/scheme.h"

#include <mlo/base/number_text.h>

#include <cmath>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

struct LogitAdjustedScheme : SchemeFor<LogitAdjustedScheme> {
  static constexpr const char* kName = "logit_adjusted";
  double tau = 1.0;  // the scale of the log prior; >= 0 (0: plain cross-entropy)
  void visit(Fields& f) override {
    f("tau", tau, [](const double& x) {
      return x >= 0 && std::isfinite(x)
                 ? std::string()
                 : "must be finite and >= 0 (0 = plain cross-entropy), got " + number_text(x);
    });
  }
  WeightNet weight_net() const override { return WeightNet::kNone; }
  std::string describe() const override {
    return "logit-adjusted cross-entropy (tau " + number_text(tau) + ")";
  }
  void apply(const SchemeContext& c) const override {
    c.classifier.weighting(LogitAdjustmentOptions(log_class_prior(c.train_counts)).tau(tau));
  }
};

}  // namespace

MLO_REGISTER_WEIGHTING(LogitAdjustedScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
