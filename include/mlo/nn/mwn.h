#pragma once
/// \file
/// `mlo::nn::MWN`: the Meta-Weight-Net that maps a sample's loss to its training weight.
///
/// Paper: J. Shu, Q. Xie, L. Yi, Q. Zhao, S. Zhou, Z. Xu, D. Meng, "Meta-Weight-Net: Learning an
/// Explicit Mapping For Sample Weighting", NeurIPS 2019 (arXiv:1902.07379).

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

namespace mlo {
namespace nn {

/// Options of `MWN`. Example: `MWNOptions(100)` (the paper's width), `MWNOptions().hidden(50)`.
struct MWNOptions {
  /// A hidden layer of `hidden` units; implicit, so a width converts.
  /* implicit */ MWNOptions(int64_t hidden = 100) : hidden_(hidden) {}
  /// Width of the hidden layer.
  TORCH_ARG(int64_t, hidden);
};

/// sigmoid(fc2(relu(fc1(loss)))), fc1: Linear(1, hidden), fc2: Linear(hidden, 1), LibTorch's
/// default Linear initialization (as the reference implementation). Input: per-sample losses as
/// a column [N, 1] (pass them detached); output: weights in (0, 1), [N, 1].
///
/// ```
/// mlo::nn::MWN mwn(mlo::nn::MWNOptions(100));
/// auto losses = torch::nn::functional::cross_entropy(logits, target,
///     torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
/// auto weights = mwn(losses.detach().unsqueeze(1));            // [N, 1]
/// auto loss = (weights.squeeze(1) * losses).mean();
/// ```
class MWNImpl : public torch::nn::Cloneable<MWNImpl> {
 public:
  /// Throws `mlo::Error` if hidden <= 0.
  explicit MWNImpl(const MWNOptions& options_ = {});

  /// Throws `mlo::Error` unless `losses` is [N, 1].
  torch::Tensor forward(const torch::Tensor& losses);
  /// (Re)creates and registers `fc1` and `fc2` from `options`.
  void reset() override;
  /// Prints `mlo::nn::MWN(hidden=H)`.
  void pretty_print(std::ostream& stream) const override;

  /// The options it was built with.
  MWNOptions options;
  /// Linear(1, hidden): the first layer.
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  /// \var fc2
  /// \brief Linear(hidden, 1): the output layer, before the sigmoid.
};
TORCH_MODULE(MWN);

}  // namespace nn
}  // namespace mlo
