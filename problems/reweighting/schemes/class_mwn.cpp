// `class_mwn`: w_i = CMWN(l_i, n_{y_i}), a weight net that also reads each sample's class
// frequency (problems/reweighting/class_mwn.h); it needs a reweighter problem.
#include "problems/reweighting/class_mwn.h"
#include "problems/reweighting/schemes/mwn.h"

#include <mlo/base/error.h>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

struct ClassMwnScheme : SchemeFor<ClassMwnScheme>, WeightNetKeys {
  static constexpr const char* kName = "class_mwn";
  void visit(Fields& fields) override { visit_keys(fields); }
  WeightNet weight_net() const override { return WeightNet::kRequired; }
  std::shared_ptr<torch::nn::Module> weight_net_module(
      const nn::ModelConfig& model, const std::vector<int64_t>& train_counts) const override {
    const auto* mwn = model.options_as<nn::MwnModel>();
    MLO_CHECK(mwn != nullptr, "problems.reweighter.model.name: class_mwn's weight net is an mwn, ",
              "got '", model.name(), "'");
    return ClassMWN(mwn->hidden, train_counts).ptr();
  }
  void apply(const SchemeContext& context) const override { apply_keys(context); }
};

}  // namespace

MLO_REGISTER_WEIGHTING(ClassMwnScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
