#pragma once
/// \file
/// Models by name, for any experiment and a user's program. A model is an options type (its
/// name, its own YAML keys, the module it builds for an input shape), registered by name like a
/// hypergradient method (base/registry.h's rule for duplicate names):
///
/// ```
/// struct MlpOptions : mlo::nn::ModelOptionsFor<MlpOptions> {
///   static constexpr const char* kName = "mlp";
///   int64_t hidden = 64;
///   void visit(mlo::Fields& f) override { f("hidden", hidden, mlo::at_least(1)); }
///   std::shared_ptr<torch::nn::Module> make(const mlo::nn::ModelInput& in) const override;
/// };
/// MLO_REGISTER_MODEL(MlpOptions);   // YAML: model: {name: mlp, hidden: 128}
/// ```
///
/// Built in: `cnn`, `resnet32`, `resnet50` (image classifiers, `mlo::nn::Chain`s) and `mwn` (the
/// Meta-Weight-Net, loss -> weight). A `model:` section of a configuration is a `ModelConfig`.

#include <mlo/base/fields.h>
#include <mlo/base/registry.h>

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

namespace mlo {
namespace nn {

/// The input a model is built for.
struct ModelInput {
  /// Channels of the input images.
  int64_t channels = 3;
  /// Height and width of the (square) input images.
  int64_t image_size = 32;
  /// Number of classes: the classifier's outputs.
  int64_t num_classes = 10;
};

/// One model's options: its name, its YAML keys (beside `name` in a `model:` section) and the
/// module it builds. Derive from `ModelOptionsFor<YourOptions>`.
class ModelOptions {
 public:
  virtual ~ModelOptions() = default;
  /// The name configs select it by ("resnet32").
  virtual std::string name() const = 0;
  /// A copy (configurations are values).
  virtual std::shared_ptr<ModelOptions> clone() const = 0;
  /// Describes the model's own keys, with their checks.
  virtual void visit(Fields& fields) { (void)fields; }
  /// The model for `input`.
  virtual std::shared_ptr<torch::nn::Module> make(const ModelInput& input) const = 0;
};

/// `name` and `clone` for an options type `Derived` with a `static constexpr const char* kName`.
template <typename Derived>
class ModelOptionsFor : public ModelOptions {
 public:
  /// `Derived::kName`.
  std::string name() const override { return Derived::kName; }
  /// A copy of this object as a `Derived`.
  std::shared_ptr<ModelOptions> clone() const override {
    return std::make_shared<Derived>(static_cast<const Derived&>(*this));
  }
};

/// Registers the model `name` defined by the options type `type` (whose defaults `defaults`
/// makes), at `where`; returns true. The registry's rule for names (base/registry.h).
bool register_model(const std::string& name, std::type_index type,
                    std::function<std::shared_ptr<ModelOptions>()> defaults,
                    const std::string& where);
/// The registered models' names, sorted.
std::vector<std::string> model_names();
/// The default options of model `name`; throws `mlo::Error` listing the registered names for an
/// unknown one.
std::shared_ptr<ModelOptions> model_options(const std::string& name);

/// A `model:` section: `name` (a registered model) and that model's own keys, in one mapping
/// (`model: {name: resnet32, activation: swish}`). Copies share nothing.
class ModelConfig {
 public:
  /// The registered model `name` with its defaults.
  explicit ModelConfig(const std::string& name = "cnn");
  /// These options (a model's type, set in code).
  explicit ModelConfig(const ModelOptions& options);
  /// A deep copy: the copy's options are its own.
  ModelConfig(const ModelConfig& other);
  /// Replaces these options by a deep copy of `other`'s.
  ModelConfig& operator=(const ModelConfig& other);

  /// The selected model's options.
  const ModelOptions& options() const { return *options_; }
  /// The selected model's options as `Options`, or null when another model is selected.
  template <typename Options>
  const Options* options_as() const {
    return dynamic_cast<const Options*>(options_.get());
  }
  /// The selected model's name.
  std::string name() const { return options_->name(); }
  /// Describes `name`, then the selected model's keys (a name read from YAML selects that
  /// model's defaults before its keys are read).
  void visit(Fields& fields);
  /// The model for `input`.
  std::shared_ptr<torch::nn::Module> make(const ModelInput& input) const;

 private:
  std::shared_ptr<ModelOptions> options_;
};

/// `cnn`: the small Fashion-MNIST CNN (nn/cnn.h).
struct CnnModel : ModelOptionsFor<CnnModel> {
  static constexpr const char* kName = "cnn";  ///< its name
  bool batch_norm = false;                     ///< batch norm after each convolution
  /// `batch_norm`.
  void visit(Fields& fields) override;
  /// The CNN for `input`.
  std::shared_ptr<torch::nn::Module> make(const ModelInput& input) const override;
};

/// The keys of the CIFAR ResNets (nn/resnet.h).
struct ResNetModel {
  /// "relu" or "swish" (`ResNetOptions::activation`).
  std::string activation = "relu";
  /// The memory-efficient activation and in-place residual sums (exact;
  /// `ResNetOptions::efficient_activation`).
  bool efficient_activation = false;
  /// The activations' memory format, "contiguous" (NCHW), "channels_last" (NHWC) or "auto":
  /// channels_last for resnet50, contiguous for resnet32 (docs/models.md).
  std::string memory_format = "auto";
  /// The keys above, with their checks.
  void visit_keys(Fields& fields);
  /// The network (resnet50's bottlenecks when `fifty`) for `input`.
  std::shared_ptr<torch::nn::Module> build(bool fifty, const ModelInput& input) const;
};

/// `resnet32`: the CIFAR ResNet-32.
struct ResNet32Model : ModelOptionsFor<ResNet32Model>, ResNetModel {
  static constexpr const char* kName = "resnet32";  ///< its name
  /// The ResNet keys.
  void visit(Fields& fields) override { visit_keys(fields); }
  /// ResNet-32 for `input`.
  std::shared_ptr<torch::nn::Module> make(const ModelInput& input) const override {
    return build(false, input);
  }
};

/// `resnet50`: ResNet-50's bottleneck blocks (3-4-6-3) on CIFAR-sized inputs.
struct ResNet50Model : ModelOptionsFor<ResNet50Model>, ResNetModel {
  static constexpr const char* kName = "resnet50";  ///< its name
  /// The ResNet keys.
  void visit(Fields& fields) override { visit_keys(fields); }
  /// ResNet-50 for `input`.
  std::shared_ptr<torch::nn::Module> make(const ModelInput& input) const override {
    return build(true, input);
  }
};

/// `mwn`: the Meta-Weight-Net (loss -> weight, nn/mwn.h).
struct MwnModel : ModelOptionsFor<MwnModel> {
  static constexpr const char* kName = "mwn";  ///< its name
  int64_t hidden = 100;                        ///< hidden width
  /// `hidden`.
  void visit(Fields& fields) override;
  /// The MWN (its input does not depend on `input`).
  std::shared_ptr<torch::nn::Module> make(const ModelInput& input) const override;
};

namespace detail {
/// `register_model` for an options type `Options` (default-constructible, with `kName`).
template <typename Options>
bool register_model_type(const char* file, int line) {
  return register_model(
      Options::kName, std::type_index(typeid(Options)),
      []() -> std::shared_ptr<ModelOptions> { return std::make_shared<Options>(); },
      registered_at(file, line));
}
}  // namespace detail

}  // namespace nn
}  // namespace mlo

/// Registers the model options type `Options` (default-constructible, with `kName`) at load
/// time, at namespace scope in a source file: `model: {name: <kName>, ...}` selects it.
#define MLO_REGISTER_MODEL(Options) \
  MLO_REGISTRATION(::mlo::nn::detail::register_model_type<Options>(__FILE__, __LINE__))
