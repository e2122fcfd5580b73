// `learned_loss`: per-class logit terms (and optionally class weights) learned on the meta set
// (problems/reweighting/learned_loss.h); it needs a reweighter problem, whose parameters are
// the terms.
#include "problems/reweighting/learned_loss.h"
#include "problems/reweighting/scheme.h"

#include <mlo/base/number_text.h>

#include <cmath>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

struct LearnedLossScheme : SchemeFor<LearnedLossScheme> {
  static constexpr const char* kName = "learned_loss";
  double init_tau = 1.0;      // the shift starts at init_tau log(prior): logit adjustment
  bool class_weights = false;  // learn per-class weights too
  bool normalize_weights = true;
  void visit(Fields& f) override {
    f("init_tau", init_tau, [](const double& x) {
      return x >= 0 && std::isfinite(x)
                 ? std::string()
                 : "must be finite and >= 0 (0: start from plain cross-entropy), got " +
                       number_text(x);
    });
    f("class_weights", class_weights);
    f("normalize_weights", normalize_weights);
  }
  WeightNet weight_net() const override { return WeightNet::kRequired; }
  bool reads_model() const override { return false; }
  std::string describe() const override {
    return std::string("learned loss (per-class logit terms") +
           (class_weights ? " and class weights" : "") + ", starting at tau " +
           number_text(init_tau) + ")";
  }
  std::shared_ptr<torch::nn::Module> weight_net_module(
      const nn::ModelConfig& model, const std::vector<int64_t>& train_counts) const override {
    (void)model;
    return LogitTerms(train_counts, init_tau, class_weights).ptr();
  }
  void apply(const SchemeContext& c) const override {
    c.classifier.weighting(LearnedLossOptions(c.reweighter).normalize(normalize_weights));
  }
};

}  // namespace

MLO_REGISTER_WEIGHTING(LearnedLossScheme);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
