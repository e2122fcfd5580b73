#include <mlo/nn/registry.h>

#include <mlo/base/error.h>
#include <mlo/nn/activations.h>
#include <mlo/nn/cnn.h>
#include <mlo/nn/mwn.h>
#include <mlo/nn/resnet.h>

#include <map>
#include <utility>

namespace mlo {
namespace nn {
namespace {

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find the map constructed whatever the initialization order.
std::map<std::string, ModelFactory>& registry() {
  static std::map<std::string, ModelFactory> factories;
  return factories;
}

std::shared_ptr<torch::nn::Module> make_cnn(const ModelSpec& s, const ModelInput& in) {
  return cnn(CNNOptions()
                 .in_channels(in.channels)
                 .image_size(in.image_size)
                 .num_classes(in.num_classes)
                 .batch_norm(s.batch_norm))
      .ptr();
}

ModelFactory make_resnet(bool fifty) {
  return [fifty](const ModelSpec& s, const ModelInput& in) {
    // "auto": where bench/resnet_formats measured channels-last faster on CPU (ResNet-50's wide
    // bottlenecks; ResNet-32's 16-64 channels run faster in NCHW in fp32).
    const bool channels_last =
        s.memory_format == "auto" ? fifty : s.memory_format == "channels_last";
    auto options = fifty ? resnet50_options(in.num_classes) : resnet32_options(in.num_classes);
    return resnet(options.in_channels(in.channels)
                      .activation(parse_activation(s.activation))
                      .efficient_activation(s.efficient_activation || s.inplace_relu)
                      .channels_last(channels_last))
        .ptr();
  };
}

const bool kBuiltIn =
    register_model("cnn", make_cnn) && register_model("resnet32", make_resnet(false)) &&
    register_model("resnet50", make_resnet(true)) &&
    register_model("mwn", [](const ModelSpec& s, const ModelInput&) {
      return std::static_pointer_cast<torch::nn::Module>(MWN(MWNOptions(s.hidden)).ptr());
    });

}  // namespace

bool register_model(const std::string& name, ModelFactory factory) {
  MLO_CHECK(!name.empty() && factory, "register_model: a model needs a name and a factory");
  registry()[name] = std::move(factory);
  return true;
}

std::vector<std::string> model_names() {
  (void)kBuiltIn;
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

std::shared_ptr<torch::nn::Module> make_model(const ModelSpec& spec, const ModelInput& input) {
  const auto found = registry().find(spec.name);
  if (found == registry().end()) {
    std::string names;
    for (const auto& known : model_names()) names += (names.empty() ? "" : ", ") + known;
    throw Error("unknown model '" + spec.name + "'; registered models: " + names);
  }
  return found->second(spec, input);
}

}  // namespace nn
}  // namespace mlo
