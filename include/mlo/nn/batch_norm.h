#pragma once
/// \file
/// `mlo::nn::batch_norm_forward`: a `BatchNorm2d` forward that forward-mode products can
/// differentiate twice.

#include <torch/nn/modules/batchnorm.h>

namespace mlo {
namespace nn {

/// `bn->forward(x)`, the same values and the same update of the running statistics (training:
/// the batch's mean and biased variance normalize, the running mean and unbiased variance move
/// by `momentum`, or by the cumulative average without one; eval: the running statistics
/// normalize). When `x` or the affine parameters carry a forward-mode tangent and a backward pass
/// may follow (grad mode on, `x` or the weight requires grad), it is taken in elementary
/// operations instead of LibTorch's fused kernel, whose backward (`native_batch_norm_backward`)
/// has no forward-mode formula: so the Hessian-vector products and mixed products of
/// `mlo/hypergrad/forward_mode.h` can run forward-over-reverse through batch norm. The
/// statistics are then taken in at least float32 and the result has `x`'s dtype, as the
/// kernel's; an input whose channels differ from the module's, or with one value per channel in
/// training, is an `mlo::Error`. mlo's models (`ConvPool`, the residual blocks, the ResNet stem)
/// and `Chain` blocks that are a `BatchNorm2d` themselves run their batch norms through it (not
/// one nested in another block, nor a `BatchNorm1d`/`3d`, nor under a block runner).
///
/// ```
/// torch::nn::BatchNorm2d bn(8);
/// torch::Tensor y = mlo::nn::batch_norm_forward(*bn, torch::randn({4, 8, 5, 5}));
/// ```
torch::Tensor batch_norm_forward(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x);

}  // namespace nn
}  // namespace mlo
