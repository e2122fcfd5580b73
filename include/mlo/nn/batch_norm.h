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
/// normalize). When `x` carries a forward-mode tangent and a backward pass may follow (grad mode
/// on, `x` requires grad) it is taken in elementary operations instead of LibTorch's fused
/// kernel, whose backward (`native_batch_norm_backward`) has no forward-mode formula: so the
/// Hessian-vector products and mixed products of `mlo/hypergrad/forward_mode.h` can run
/// forward-over-reverse through batch norm. The result then has `x`'s dtype, as the kernel's.
/// mlo's models (`ConvPool`, the residual blocks, the ResNet stem) and `Chain`'s plain blocks
/// of type `BatchNorm2d` run their batch norms through it.
torch::Tensor batch_norm_forward(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x);

}  // namespace nn
}  // namespace mlo
