#pragma once
/// \file
/// CIFAR ResNets as `mlo::nn::Chain`s: ResNet-32 (basic blocks, 3 stages of 5) and ResNet-50
/// (bottleneck blocks 3-4-6-3), plus a generic builder. Blocks: "stem", "layer<s>.<b>", "head".
///
/// Paper: K. He, X. Zhang, S. Ren, J. Sun, "Deep Residual Learning for Image Recognition",
/// CVPR 2016 (arXiv:1512.03385). The ResNet-50 is the usual CIFAR variant: a 3x3 stride-1 stem
/// with no max-pool, so stage 1 runs at 32x32.

#include <mlo/nn/chain.h>
#include <mlo/nn/residual.h>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>
#include <vector>

namespace mlo {
namespace nn {

/// The stem of a CIFAR ResNet: act(bn(conv3x3(x))) (act: ReLU by default), stride 1, no
/// pooling. Kaiming init.
/// Example: `ResNetStem(3, 16)` maps [N, 3, 32, 32] to [N, 16, 32, 32].
class ResNetStemImpl : public torch::nn::Cloneable<ResNetStemImpl> {
 public:
  /// Throws `mlo::Error` for non-positive channels.
  ResNetStemImpl(int64_t in_channels, int64_t out_channels,
                 Activation activation = Activation::kReLU, bool efficient_activation = false);

  /// act(bn(conv(x))), after converting `x` to channels-last with `channels_last`.
  torch::Tensor forward(const torch::Tensor& x);
  /// (Re)creates and registers `conv` and `bn`, Kaiming-initialized.
  void reset() override;
  /// Prints `mlo::nn::ResNetStem(in, out)` and the settings that differ from the defaults.
  void pretty_print(std::ostream& stream) const override;

  /// Input channels.
  int64_t in_channels, out_channels;
  /// The activation after the batch norm.
  Activation activation;
  /// See `BasicBlockOptions::efficient_activation`.
  bool efficient_activation;
  /// Converts the input to channels-last (NHWC) first (`ResNetOptions::channels_last`).
  bool channels_last = false;
  /// The 3x3 convolution (stride 1, padding 1, no bias).
  torch::nn::Conv2d conv{nullptr};
  /// The batch norm after `conv`.
  torch::nn::BatchNorm2d bn{nullptr};
  /// \var out_channels
  /// \brief Output channels (of the convolution).
};
TORCH_MODULE(ResNetStem);

/// The head of a ResNet: global average pooling, flatten, linear (LibTorch's default init).
/// Example: `ResNetHead(64, 10)` maps [N, 64, 8, 8] to [N, 10] logits.
class ResNetHeadImpl : public torch::nn::Cloneable<ResNetHeadImpl> {
 public:
  /// Throws `mlo::Error` for non-positive sizes.
  ResNetHeadImpl(int64_t in_features, int64_t num_classes);

  /// fc(flatten(adaptive_avg_pool2d(x, 1))): [N, in_features, H, W] to [N, num_classes].
  torch::Tensor forward(const torch::Tensor& x);
  /// (Re)creates and registers `fc`.
  void reset() override;
  /// Prints `mlo::nn::ResNetHead(in, num_classes)`.
  void pretty_print(std::ostream& stream) const override;

  /// Input channels, averaged over the image.
  int64_t in_features, num_classes;
  /// The linear layer (with bias).
  torch::nn::Linear fc{nullptr};
  /// \var num_classes
  /// \brief Outputs of the linear layer: the logits.
};
TORCH_MODULE(ResNetHead);

/// Residual block type of a ResNet.
enum class BlockType {
  kBasic,       ///< `BasicBlock`: output width = stage width
  kBottleneck,  ///< `Bottleneck`: output width = expansion * stage width
};

/// Architecture of a CIFAR-style ResNet. Stage s has `blocks[s]` residual blocks of base width
/// `widths[s]`; the first block of every stage but the first has stride 2.
/// Example: `ResNetOptions(BlockType::kBasic, {3, 3, 3}, {16, 32, 64}).num_classes(100)` is
/// ResNet-20 for CIFAR-100; see `resnet32_options()` and `resnet50_options()`.
struct ResNetOptions {
  /// `stem_channels` defaults to `widths[0]`.
  ResNetOptions(BlockType block, std::vector<int64_t> blocks, std::vector<int64_t> widths);
  /// The residual block type of every stage.
  TORCH_ARG(BlockType, block);
  /// Residual blocks per stage.
  TORCH_ARG(std::vector<int64_t>, blocks);
  /// Base width per stage.
  TORCH_ARG(std::vector<int64_t>, widths);
  /// Output channels of the 3x3 stem convolution.
  TORCH_ARG(int64_t, stem_channels);
  /// Input image channels.
  TORCH_ARG(int64_t, in_channels) = 3;
  /// Outputs of the head: the logits.
  TORCH_ARG(int64_t, num_classes) = 10;
  /// Bottleneck expansion (ignored by basic blocks).
  TORCH_ARG(int64_t, expansion) = 4;
  /// Shortcut where the stride or width changes; identity elsewhere.
  TORCH_ARG(Shortcut, shortcut) = Shortcut::kProjection;
  /// The activation of every block and of the stem: ReLU (the paper's) or Swish.
  TORCH_ARG(Activation, activation) = Activation::kReLU;
  /// Memory-efficient activations and in-place residual sums (see
  /// `BasicBlockOptions::efficient_activation`): in-place ReLU, or the Swish that keeps only its
  /// input instead of the hand-written composition.
  TORCH_ARG(bool, efficient_activation) = false;
  /// Channels-last (NHWC) memory format: the convolution weights are stored so, and the stem
  /// converts its input, so every activation after it is NHWC (oneDNN's native layout on CPU).
  /// Same math; only the layout and with it the convolution kernels change.
  TORCH_ARG(bool, channels_last) = false;
};

/// ResNet-32 for CIFAR: basic blocks {5, 5, 5}, widths {16, 32, 64}, stem 16, projection
/// shortcuts (466,906 parameters at 10 classes; 464,154 with `.shortcut(Shortcut::kZeroPad)`).
ResNetOptions resnet32_options(int64_t num_classes = 10);

/// ResNet-50 for CIFAR: bottleneck blocks {3, 4, 6, 3}, widths {64, 128, 256, 512},
/// expansion 4, stem 64 (3x3, stride 1, no max-pool), projection shortcuts (23,520,842
/// parameters at 10 classes).
ResNetOptions resnet50_options(int64_t num_classes = 10);

/// Builds the ResNet as a Chain: "stem", then "layer<s>.<b>" (s from 1, b from 0) for each
/// residual block, then "head" (pool, flatten, linear). Throws `mlo::Error` for an empty or
/// mismatched `blocks`/`widths`, or non-positive sizes.
///
/// ```
/// mlo::nn::Chain model = mlo::nn::resnet(mlo::nn::resnet32_options().efficient_activation(true));
/// auto logits = model->forward(torch::randn({2, 3, 32, 32}));  // [2, 10]
/// ```
Chain resnet(const ResNetOptions& options);

/// `resnet(resnet32_options(num_classes))`: 17 blocks (stem, 15 basic blocks, head).
Chain resnet32(int64_t num_classes = 10);

/// `resnet(resnet50_options(num_classes))`: 18 blocks (stem, 16 bottlenecks, head).
Chain resnet50(int64_t num_classes = 10);

}  // namespace nn
}  // namespace mlo
