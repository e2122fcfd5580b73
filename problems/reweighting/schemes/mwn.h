#pragma once
// The weight-net schemes' shared keys (mwn, class_mwn): how the classifier reads the weights
// the reweighter's net gives (WeightNetOptions, problems/reweighting/reweighting.h).

#include "problems/reweighting/scheme.h"

namespace mlo {
namespace problems {
namespace reweighting {

/// The keys of a weight-net scheme and the weighting they set.
struct WeightNetKeys {
  /// sum_i w_i l_i / sum_i w_i (true) or mean_i w_i l_i (false).
  bool normalize_weights = true;
  /// The weight net reads the losses of the classifier's own step, also inside hypergradients
  /// (WeightNetOptions::freeze_inputs).
  bool freeze_weight_inputs = true;
  /// Bound on a sample's weight relative to the batch's mean weight; 0: none.
  double max_relative_weight = 0.0;
  /// Floor under every weight, in [0, 1); 0: none (docs/reweighting.md, "The weight floor").
  double weight_floor = 0.1;
  /// The floor applies after the classifier's first this many steps; 0: from the first.
  int64_t weight_floor_after = 0;
  /// tau of a logit adjustment under the weights (WeightNetOptions::logit_shift); 0: none.
  double logit_adjustment = 0.0;
  /// The keys, with their checks.
  void visit_keys(Fields& fields);
  /// The classifier weighted by `context.reweighter`'s net, or plain without one.
  void apply_keys(const SchemeContext& context) const;
};

/// `mwn`: Meta-Weight-Net, w_i = MWN(l_i) (Shu et al. 2019); without a reweighter, plain
/// cross-entropy (the baseline).
struct MwnScheme : SchemeFor<MwnScheme>, WeightNetKeys {
  static constexpr const char* kName = "mwn";  ///< its name
  /// The weight-net keys.
  void visit(Fields& fields) override { visit_keys(fields); }
  /// Optional: without a reweighter, the baseline.
  WeightNet weight_net() const override { return WeightNet::kOptional; }
  /// The weighting.
  void apply(const SchemeContext& context) const override { apply_keys(context); }
};

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
