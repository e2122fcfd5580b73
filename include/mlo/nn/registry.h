#pragma once
/// \file
/// Models by name, for any experiment and a user's program: `ModelSpec` holds the generic model
/// keys (YAML
/// `model: {name, hidden, batch_norm, activation, efficient_activation, memory_format}`),
/// `make_model` builds the named model for an input shape. Built in: `cnn`, `resnet32`,
/// `resnet50` (image classifiers, `mlo::nn::Chain`s) and `mwn` (the Meta-Weight-Net, loss ->
/// weight). A program adds its own with `register_model`.
///
/// ```
/// auto model = mlo::nn::make_model(mlo::nn::ModelSpec{"resnet32"}, {3, 32, 10});
/// ```

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace nn {

/// The generic model keys; each model reads those that apply to it.
struct ModelSpec {
  /// The registered model to build (`model_names()`).
  std::string name = "cnn";
  /// mwn: hidden width.
  int64_t hidden = 100;
  /// cnn: batch norm after each convolution.
  bool batch_norm = false;
  /// resnet32, resnet50: "relu" or "swish" (`ResNetOptions::activation`).
  std::string activation = "relu";
  /// resnet32, resnet50: the memory-efficient activation and in-place residual sums (exact;
  /// `ResNetOptions::efficient_activation`).
  bool efficient_activation = false;
  /// The older name of `efficient_activation` for ReLU (in-place ReLU); either turns it on.
  bool inplace_relu = false;
  /// resnet32, resnet50: the activations' memory format, "contiguous" (NCHW), "channels_last"
  /// (NHWC) or "auto": the faster one as measured on CPU by bench/resnet_formats
  /// (channels_last for resnet50, contiguous for resnet32).
  std::string memory_format = "auto";
};

/// The input a model is built for.
struct ModelInput {
  /// Channels of the input images.
  int64_t channels = 3;
  /// Height and width of the (square) input images.
  int64_t image_size = 32;
  /// Number of classes: the classifier's outputs.
  int64_t num_classes = 10;
};

/// Builds a model from the generic keys and the input it is for.
using ModelFactory =
    std::function<std::shared_ptr<torch::nn::Module>(const ModelSpec&, const ModelInput&)>;

/// Registers `factory` as `name` (a later registration replaces an earlier one); returns true.
bool register_model(const std::string& name, ModelFactory factory);
/// The registered models' names, sorted.
std::vector<std::string> model_names();
/// The model `spec.name` for `input`; throws `mlo::Error` listing the registered names for an
/// unknown one.
std::shared_ptr<torch::nn::Module> make_model(const ModelSpec& spec, const ModelInput& input);

}  // namespace nn
}  // namespace mlo
