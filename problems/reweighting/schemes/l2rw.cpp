// `l2rw`: Learning to Reweight (Ren et al. 2018, problems/reweighting/l2rw.h): the classifier
// weights each batch by a one-step look-ahead on a meta batch it draws itself; no weight net.
#include "problems/reweighting/scheme.h"

#include <mlo/base/number_text.h>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

struct L2rwScheme : SchemeFor<L2rwScheme> {
  static constexpr const char* kName = "l2rw";
  double alpha = 0.01;  // finite-difference step relative to the meta gradient's norm
  void visit(Fields& f) override {
    f("alpha", alpha,
      [](const double& x) { return x > 0 ? std::string() : "must be > 0, got " + number_text(x); });
  }
  WeightNet weight_net() const override { return WeightNet::kNone; }
  std::string describe() const override { return "Learning to Reweight (no weight net)"; }
  void apply(const SchemeContext& c) const override {
    c.classifier.weighting(L2rwOptions(c.meta).alpha(alpha));
  }
};

}  // namespace

MLO_REGISTER_WEIGHTING(L2rwScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
