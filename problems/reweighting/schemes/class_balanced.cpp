// `class_balanced`: class-balanced cross-entropy (Cui et al. 2019, class_priors.h), one level:
// fixed weights by class from the effective number of samples; no weight net.
#include "problems/reweighting/class_priors.h"
#include "problems/reweighting/scheme.h"

#include <mlo/base/number_text.h>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

struct ClassBalancedScheme : SchemeFor<ClassBalancedScheme> {
  static constexpr const char* kName = "class_balanced";
  double beta = 0.999;           // effective-number beta in [0, 1]; 1: inverse class frequency
  bool normalize_weights = true;  // sum_i w_i l_i / sum_i w_i
  void visit(Fields& f) override {
    f("beta", beta, [](const double& x) {
      return x >= 0 && x <= 1
                 ? std::string()
                 : "must be in [0, 1] (1 = inverse class frequency), got " + number_text(x);
    });
    f("normalize_weights", normalize_weights);
  }
  WeightNet weight_net() const override { return WeightNet::kNone; }
  std::string describe() const override {
    return "class-balanced cross-entropy (beta " + number_text(beta) +
           (normalize_weights ? ", normalized)" : ", unnormalized)");
  }
  void apply(const SchemeContext& c) const override {
    c.classifier.weighting(ClassWeightOptions(class_balanced_weights(c.train_counts, beta))
                               .normalize(normalize_weights));
  }
};

}  // namespace

MLO_REGISTER_WEIGHTING(ClassBalancedScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
