#include <mlo/nn/resnet.h>

#include <mlo/base/error.h>
#include <mlo/nn/batch_norm.h>

#include "init.h"

#include <string>
#include <utility>

namespace mlo {
namespace nn {

ResNetStemImpl::ResNetStemImpl(int64_t in_channels_, int64_t out_channels_, Activation activation_,
                               bool efficient_activation_)
    : in_channels(in_channels_),
      out_channels(out_channels_),
      activation(activation_),
      efficient_activation(efficient_activation_) {
  MLO_CHECK(in_channels > 0 && out_channels > 0,
            "ResNetStem: channels must be positive, got in=", in_channels, " out=", out_channels);
  reset();
}

void ResNetStemImpl::reset() {
  conv = register_module("conv", detail::kaiming_conv(in_channels, out_channels, 3, 1));
  bn = register_module("bn", detail::batch_norm(out_channels));
}

torch::Tensor ResNetStemImpl::forward(const torch::Tensor& x) {
  const torch::Tensor input = channels_last ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
  return activate(batch_norm_forward(*bn, conv->forward(input)), activation, efficient_activation);
}

void ResNetStemImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::ResNetStem(" << in_channels << ", " << out_channels
         << (activation == Activation::kReLU ? "" : ", swish")
         << (efficient_activation ? ", efficient_activation" : "")
         << (channels_last ? ", channels_last" : "") << ")";
}

ResNetHeadImpl::ResNetHeadImpl(int64_t in_features_, int64_t num_classes_)
    : in_features(in_features_), num_classes(num_classes_) {
  MLO_CHECK(in_features > 0 && num_classes > 0,
            "ResNetHead: sizes must be positive, got in=", in_features,
            " num_classes=", num_classes);
  reset();
}

void ResNetHeadImpl::reset() {
  fc = register_module("fc", torch::nn::Linear(in_features, num_classes));
}

torch::Tensor ResNetHeadImpl::forward(const torch::Tensor& x) {
  return fc->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(/*start_dim=*/1));
}

void ResNetHeadImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::ResNetHead(" << in_features << ", " << num_classes << ")";
}

ResNetOptions::ResNetOptions(BlockType block, std::vector<int64_t> blocks,
                             std::vector<int64_t> widths)
    : block_(block),
      blocks_(std::move(blocks)),
      widths_(std::move(widths)),
      stem_channels_(widths_.empty() ? 0 : widths_.front()) {}

ResNetOptions resnet32_options(int64_t num_classes) {
  return ResNetOptions(BlockType::kBasic, {5, 5, 5}, {16, 32, 64}).num_classes(num_classes);
}

ResNetOptions resnet50_options(int64_t num_classes) {
  return ResNetOptions(BlockType::kBottleneck, {3, 4, 6, 3}, {64, 128, 256, 512})
      .num_classes(num_classes);
}

Chain resnet(const ResNetOptions& options) {
  const auto& blocks = options.blocks();
  const auto& widths = options.widths();
  MLO_CHECK(!blocks.empty(), "ResNetOptions: 'blocks' must name at least one stage");
  MLO_CHECK(blocks.size() == widths.size(), "ResNetOptions: 'blocks' has ", blocks.size(),
            " stages but 'widths' has ", widths.size());
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    MLO_CHECK(blocks[s] > 0, "ResNetOptions: blocks[", s, "] must be positive, got ", blocks[s]);
    MLO_CHECK(widths[s] > 0, "ResNetOptions: widths[", s, "] must be positive, got ", widths[s]);
  }
  MLO_CHECK(options.num_classes() > 0, "ResNetOptions: num_classes must be positive, got ",
            options.num_classes());
  MLO_CHECK(options.expansion() > 0, "ResNetOptions: expansion must be positive, got ",
            options.expansion());

  Chain chain;
  ResNetStem stem(options.in_channels(), options.stem_channels(), options.activation(),
                  options.efficient_activation());
  stem->channels_last = options.channels_last();
  chain->push_back("stem", stem);
  int64_t channels = options.stem_channels();
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      if (options.block() == BlockType::kBasic) {
        chain->push_back(name,
                         BasicBlock(BasicBlockOptions(channels, widths[s])
                                        .stride(stride)
                                        .shortcut(options.shortcut())
                                        .activation(options.activation())
                                        .efficient_activation(options.efficient_activation())));
        channels = widths[s];
      } else {
        chain->push_back(name,
                         Bottleneck(BottleneckOptions(channels, widths[s])
                                        .expansion(options.expansion())
                                        .stride(stride)
                                        .shortcut(options.shortcut())
                                        .activation(options.activation())
                                        .efficient_activation(options.efficient_activation())));
        channels = options.expansion() * widths[s];
      }
    }
  }
  chain->push_back("head", ResNetHead(channels, options.num_classes()));
  if (options.channels_last()) {
    torch::NoGradGuard no_grad;
    for (auto& p : chain->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  return chain;
}

Chain resnet32(int64_t num_classes) { return resnet(resnet32_options(num_classes)); }

Chain resnet50(int64_t num_classes) { return resnet(resnet50_options(num_classes)); }

}  // namespace nn
}  // namespace mlo
