#pragma once
/// \file
/// A learned loss for long-tailed classification, in the spirit of AutoBalance (M. Li, X. Zhang,
/// C. Thrampoulidis, J. Chen, S. Oymak, "AutoBalance: Optimized Loss Functions for Imbalanced
/// Data", NeurIPS 2021): the upper level owns per-class logit terms and, optionally, per-class
/// weights, and the classifier trains on
///
///   l_i = CE(z_i * exp(a) + b, y_i),      L = sum_i c_{y_i} l_i / sum_i c_{y_i},   c = exp(d)
///
/// (z the classifier's logits, a, b, d in R^C, products by class column). The terms are learned
/// on the balanced meta loss of the plain logits, through the hypergradient method the
/// classifier's config selects; predictions use the plain logits, as logit adjustment does. With
/// a = 0, b = tau log(prior) and no weights the loss is logit adjustment's, which is how the
/// terms start (`init_tau`).

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {

/// The parameters `log_scale` (a, zeros), `shift` (b, init_tau log(n_c / sum n)) and, with
/// class weights, `log_weight` (d, zeros).
///
/// ```
/// LogitTerms terms({5000, 50}, /*init_tau=*/1.0, /*class_weights=*/false);
/// auto adjusted = terms->forward(logits);   // logits * exp(a) + b
/// ```
class LogitTermsImpl : public torch::nn::Module {
 public:
  /// Throws `mlo::Error` for no classes, a class with no training sample, or init_tau < 0 or
  /// not finite.
  LogitTermsImpl(const std::vector<int64_t>& train_counts, double init_tau, bool class_weights);
  /// z * exp(a) + b for logits z [N, C].
  at::Tensor forward(const at::Tensor& logits) const;
  /// Whether it has per-class weights.
  bool has_class_weights() const { return log_weight.defined(); }
  /// exp(d)[targets] [N]; ones without class weights.
  at::Tensor weights(const at::Tensor& targets) const;

  at::Tensor log_scale, shift, log_weight;
};
TORCH_MODULE(LogitTerms);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
