#include <mlo/nn/registry.h>

#include <mlo/base/choice.h>
#include <mlo/base/error.h>
#include <mlo/nn/activations.h>
#include <mlo/nn/cnn.h>
#include <mlo/nn/mwn.h>
#include <mlo/nn/resnet.h>

#include <utility>

namespace mlo {
namespace nn {
namespace {

using Defaults = std::function<std::shared_ptr<ModelOptions>()>;

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find it constructed whatever the initialization order.
Registry<Defaults>& registry() {
  static Registry<Defaults> models("model", "a model of your own registers with MLO_REGISTER_MODEL");
  return models;
}

}  // namespace

void CnnModel::visit(Fields& f) { f("batch_norm", batch_norm); }

std::shared_ptr<torch::nn::Module> CnnModel::make(const ModelInput& in) const {
  return cnn(CNNOptions()
                 .in_channels(in.channels)
                 .image_size(in.image_size)
                 .num_classes(in.num_classes)
                 .batch_norm(batch_norm))
      .ptr();
}

void ResNetModel::visit_keys(Fields& f) {
  f("activation", activation, one_of({"relu", "swish"}));
  f("efficient_activation", efficient_activation);
  f("memory_format", memory_format, one_of({"auto", "contiguous", "channels_last"}));
}

std::shared_ptr<torch::nn::Module> ResNetModel::build(bool fifty, const ModelInput& in) const {
  // "auto": where bench/resnet_formats measured channels-last faster on CPU (ResNet-50's wide
  // bottlenecks; ResNet-32's 16-64 channels run faster in NCHW in fp32).
  const bool channels_last = memory_format == "auto" ? fifty : memory_format == "channels_last";
  auto options = fifty ? resnet50_options(in.num_classes) : resnet32_options(in.num_classes);
  return resnet(options.in_channels(in.channels)
                    .activation(parse_activation(activation))
                    .efficient_activation(efficient_activation)
                    .channels_last(channels_last))
      .ptr();
}

void MwnModel::visit(Fields& f) { f("hidden", hidden, int_in_range(1, 65536)); }

std::shared_ptr<torch::nn::Module> MwnModel::make(const ModelInput&) const {
  return MWN(MWNOptions(hidden)).ptr();
}

MLO_REGISTER_MODEL(CnnModel);
MLO_REGISTER_MODEL(ResNet32Model);
MLO_REGISTER_MODEL(ResNet50Model);
MLO_REGISTER_MODEL(MwnModel);

bool register_model(const std::string& name, std::type_index type, Defaults defaults,
                    const std::string& where) {
  MLO_CHECK(defaults, "register_model: the model '", name, "' needs its defaults (", where, ")");
  return registry().add(name, type, std::move(defaults), where);
}

std::vector<std::string> model_names() { return registry().names(); }

std::shared_ptr<ModelOptions> model_options(const std::string& name) {
  auto options = registry().at(name)();
  MLO_CHECK(options && options->name() == name, "model '", name, "': its registered defaults ",
            "are ", options ? "named '" + options->name() + "'" : std::string("null"));
  return options;
}

ModelConfig::ModelConfig(const std::string& name) : options_(model_options(name)) {}

ModelConfig::ModelConfig(const ModelOptions& options) : options_(options.clone()) {}

ModelConfig::ModelConfig(const ModelConfig& other) : options_(other.options_->clone()) {}

ModelConfig& ModelConfig::operator=(const ModelConfig& other) {
  if (this != &other) options_ = other.options_->clone();
  return *this;
}

void ModelConfig::visit(Fields& f) {
  visit_choice(f, "name", options_, model_names(), model_options, ChoiceKeys::kBeside);
}

std::shared_ptr<torch::nn::Module> ModelConfig::make(const ModelInput& input) const {
  return options_->make(input);
}

}  // namespace nn
}  // namespace mlo
