#pragma once
/// \file
/// Residual blocks of the CIFAR ResNets: `BasicBlock` (two 3x3 convolutions, ResNet-20/32/56) and
/// `Bottleneck` (1x1 -> 3x3 -> 1x1, ResNet-50). Each is one block of a `mlo::nn::Chain`.
///
/// Paper: K. He, X. Zhang, S. Ren, J. Sun, "Deep Residual Learning for Image Recognition",
/// CVPR 2016 (arXiv:1512.03385); CIFAR networks in its Section 4.2, shortcut options A/B in 3.3.

#include <mlo/nn/activations.h>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

namespace mlo {
namespace nn {

/// How a residual block matches its shortcut to its output when the stride or width changes
/// (an identity shortcut is used otherwise).
enum class Shortcut {
  /// Option B: 1x1 convolution with the block's stride, then batch norm (adds parameters).
  kProjection,
  /// Option A: subsample by the stride and zero-pad the channels, half before and half after
  /// (no parameters; the original CIFAR ResNet-32 with 0.46M parameters).
  kZeroPad,
};

/// Options of `BasicBlock`. Example: `BasicBlockOptions(16, 32).stride(2)`.
struct BasicBlockOptions {
  /// A block from `in_channels` to `out_channels`, other options at their defaults.
  BasicBlockOptions(int64_t in_channels, int64_t out_channels)
      : in_channels_(in_channels), out_channels_(out_channels) {}
  /// Channels of the block's input.
  TORCH_ARG(int64_t, in_channels);
  /// Channels of the block's output (and of both convolutions).
  TORCH_ARG(int64_t, out_channels);
  /// Stride of the first 3x3 convolution (and of the shortcut).
  TORCH_ARG(int64_t, stride) = 1;
  /// The shortcut when the stride or the width changes.
  TORCH_ARG(Shortcut, shortcut) = Shortcut::kProjection;
  /// The activation after each batch norm and after the residual sum.
  TORCH_ARG(Activation, activation) = Activation::kReLU;
  /// The memory-efficient form of the activation (`mlo::nn::activate`) and the residual sum in
  /// place: ReLU in place saves a short-lived copy per use, Swish keeping only its input saves
  /// one activation per use until backward. Same values, gradients and double backward, because
  /// batch norm and convolution do not save their outputs.
  TORCH_ARG(bool, efficient_activation) = false;
};

/// act(bn2(conv2(act(bn1(conv1(x))))) + shortcut(x)) (act: ReLU by default), 3x3 convolutions
/// without bias, Kaiming-normal initialization (fan-out, ReLU gain), batch-norm weight 1 and
/// bias 0.
/// Input [N, in, H, W], output [N, out, H/stride, W/stride].
///
/// ```
/// mlo::nn::BasicBlock block(mlo::nn::BasicBlockOptions(16, 32).stride(2));
/// auto y = block(torch::randn({2, 16, 32, 32}));  // [2, 32, 16, 16]
/// ```
class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl> {
 public:
  /// Throws `mlo::Error` for non-positive channels or stride, or a zero-pad shortcut that
  /// would have to shrink the channels.
  explicit BasicBlockImpl(const BasicBlockOptions& options);

  /// The block on `x`: [N, in, H, W] to [N, out, H/stride, W/stride].
  torch::Tensor forward(const torch::Tensor& x);
  /// (Re)creates and registers the layers from `options`, Kaiming-initialized.
  void reset() override;
  /// Prints `mlo::nn::BasicBlock(in, out, stride=S)` and the options that differ from the
  /// defaults.
  void pretty_print(std::ostream& stream) const override;

  /// The options it was built with.
  BasicBlockOptions options;
  /// The first 3x3 convolution, in -> out channels, with the block's stride.
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  /// The batch norm after `conv1`.
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  /// Defined only for a projection shortcut.
  torch::nn::Conv2d shortcut_conv{nullptr};
  /// The batch norm after `shortcut_conv`; defined only for a projection shortcut.
  torch::nn::BatchNorm2d shortcut_bn{nullptr};
  /// \var conv2
  /// \brief The second 3x3 convolution, out -> out channels.
  /// \var bn2
  /// \brief The batch norm after `conv2`.
};
TORCH_MODULE(BasicBlock);

/// Options of `Bottleneck`: the block outputs `expansion * planes` channels.
/// Example: `BottleneckOptions(256, 128).stride(2)` (256 -> 512 channels, half the resolution).
struct BottleneckOptions {
  /// A block from `in_channels` with inner width `planes`, other options at their defaults.
  BottleneckOptions(int64_t in_channels, int64_t planes)
      : in_channels_(in_channels), planes_(planes) {}
  /// Channels of the block's input.
  TORCH_ARG(int64_t, in_channels);
  /// Width of the inner 1x1 and 3x3 convolutions.
  TORCH_ARG(int64_t, planes);
  /// Output channels are `expansion * planes`.
  TORCH_ARG(int64_t, expansion) = 4;
  /// Stride of the 3x3 convolution (as in torchvision's "ResNet v1.5") and of the shortcut.
  TORCH_ARG(int64_t, stride) = 1;
  /// The shortcut when the stride or the width changes.
  TORCH_ARG(Shortcut, shortcut) = Shortcut::kProjection;
  /// See `BasicBlockOptions::activation`.
  TORCH_ARG(Activation, activation) = Activation::kReLU;
  /// See `BasicBlockOptions::efficient_activation`.
  TORCH_ARG(bool, efficient_activation) = false;
};

/// act(bn3(conv3(act(bn2(conv2(act(bn1(conv1(x)))))))) + shortcut(x)), with conv1 1x1
/// in -> planes, conv2 3x3 planes -> planes (stride), conv3 1x1 planes -> expansion * planes;
/// no biases, Kaiming-normal initialization.
///
/// ```
/// mlo::nn::Bottleneck block(mlo::nn::BottleneckOptions(64, 64));
/// auto y = block(torch::randn({2, 64, 32, 32}));  // [2, 256, 32, 32]
/// ```
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl> {
 public:
  /// Throws `mlo::Error` for non-positive sizes or an impossible zero-pad shortcut.
  explicit BottleneckImpl(const BottleneckOptions& options);

  /// The block on `x`: [N, in, H, W] to [N, expansion * planes, H/stride, W/stride].
  torch::Tensor forward(const torch::Tensor& x);
  /// (Re)creates and registers the layers from `options`, Kaiming-initialized.
  void reset() override;
  /// Prints `mlo::nn::Bottleneck(in, planes, expansion=E, stride=S)` and the options that
  /// differ from the defaults.
  void pretty_print(std::ostream& stream) const override;

  /// The options it was built with.
  BottleneckOptions options;
  /// The first 1x1 convolution, in -> planes channels.
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  /// The batch norm after `conv1`.
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  /// Defined only for a projection shortcut.
  torch::nn::Conv2d shortcut_conv{nullptr};
  /// The batch norm after `shortcut_conv`; defined only for a projection shortcut.
  torch::nn::BatchNorm2d shortcut_bn{nullptr};
  /// \var conv2
  /// \brief The 3x3 convolution, planes -> planes, with the block's stride.
  /// \var conv3
  /// \brief The last 1x1 convolution, planes -> expansion * planes.
  /// \var bn2
  /// \brief The batch norm after `conv2`.
  /// \var bn3
  /// \brief The batch norm after `conv3`.
};
TORCH_MODULE(Bottleneck);

}  // namespace nn
}  // namespace mlo
