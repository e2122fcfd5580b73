#include "problems/reweighting/schemes/mwn.h"

#include "problems/reweighting/class_priors.h"

#include <mlo/base/number_text.h>

#include <cmath>

namespace mlo {
namespace problems {
namespace reweighting {

void WeightNetKeys::visit_keys(Fields& s) {
  s("normalize_weights", normalize_weights);
  s("freeze_weight_inputs", freeze_weight_inputs);
  s("max_relative_weight", max_relative_weight, [](const double& x) {
    return x == 0 || x >= 1 ? std::string()
                            : "must be 0 (no bound) or >= 1, got " + number_text(x);
  });
  s("weight_floor", weight_floor, [](const double& x) {
    return x >= 0 && x < 1 ? std::string() : "must be in [0, 1) (0 = none), got " + number_text(x);
  });
  s("weight_floor_after", weight_floor_after, [](const int64_t& x) {
    return x >= 0 ? std::string()
                  : "must be >= 0 (steps; 0 = from the first), got " + std::to_string(x);
  });
  s("logit_adjustment", logit_adjustment, [](const double& x) {
    return x >= 0 && std::isfinite(x)
               ? std::string()
               : "must be finite and >= 0 (the tau of logit adjustment; 0 = none), got " +
                     number_text(x);
  });
}

void WeightNetKeys::apply_keys(const SchemeContext& c) const {
  // Without a reweighter, the baseline: plain training (the settings refuse a logit adjustment
  // there).
  if (c.reweighter == nullptr) {
    c.classifier.weighting(PlainOptions());
    return;
  }
  const at::Tensor log_prior =
      logit_adjustment > 0 ? log_class_prior(c.train_counts) : at::Tensor();
  c.classifier.weighting(WeightNetOptions(c.reweighter)
                             .normalize(normalize_weights)
                             .freeze_inputs(freeze_weight_inputs)
                             .max_relative_weight(max_relative_weight)
                             .weight_floor(weight_floor)
                             .weight_floor_after(weight_floor_after)
                             .logit_shift(log_prior.defined() ? log_prior * logit_adjustment
                                                              : at::Tensor()));
}

MLO_REGISTER_WEIGHTING(MwnScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
