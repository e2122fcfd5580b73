// The model registry: the built-in models for an input shape, a program's own model, unknown
// names.
#include <mlo/base/error.h>
#include <mlo/nn/chain.h>
#include <mlo/base/fields.h>
#include <mlo/nn/registry.h>

#include <catch2/catch.hpp>

#include <torch/torch.h>

namespace model_registry_test {

using Catch::Contains;

namespace {

int64_t parameter_count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("Model registry: the built-in models, built for the input", "[nn]") {
  CHECK(mlo::nn::model_names() == std::vector<std::string>{"cnn", "mwn", "resnet32", "resnet50"});
  // A classifier is a Chain producing one logit per class, for the input's channels and size.
  for (const char* name : {"cnn", "resnet32"}) {
    CAPTURE(name);
    auto model = mlo::nn::ModelConfig(name).make({1, 28, 7});
    auto chain = std::dynamic_pointer_cast<mlo::nn::ChainImpl>(model);
    REQUIRE(chain);
    chain->eval();
    CHECK(chain->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef({2, 7}));
  }
  // MWN: 1 -> hidden -> 1 with biases: 3 * hidden + 1 parameters.
  mlo::nn::MwnModel mwn;
  mwn.hidden = 7;
  CHECK(parameter_count(*mlo::nn::ModelConfig(mwn).make({})) == 22);
  // The CNN's batch norm key changes the model.
  mlo::nn::CnnModel plain, with_bn;
  with_bn.batch_norm = true;
  CHECK(parameter_count(*with_bn.make({})) > parameter_count(*plain.make({})));
}

TEST_CASE("Model registry: each model's own keys, from YAML's visit", "[nn]") {
  // A `model:` section reads `name` first, then that model's keys; another model's key is not
  // one of them (the reader refuses it as unknown).
  mlo::nn::ModelConfig config("cnn");
  std::map<std::string, std::string> keys;
  keys = mlo::field_values([&](mlo::Fields& f) { config.visit(f); });
  CHECK(keys == std::map<std::string, std::string>{{"name", "cnn"}, {"batch_norm", "false"}});
  mlo::nn::ModelConfig resnet("resnet32");
  keys = mlo::field_values([&](mlo::Fields& f) { resnet.visit(f); });
  CHECK(keys.count("activation") == 1);
  CHECK(keys.count("batch_norm") == 0);
  CHECK(mlo::first_failed_check([&](mlo::Fields& f) { resnet.visit(f); }).empty());
  mlo::nn::ResNet32Model bad;
  bad.activation = "gelu";
  mlo::nn::ModelConfig with_bad(bad);
  CHECK(mlo::first_failed_check([&](mlo::Fields& f) { with_bad.visit(f); }) ==
        "activation: must be one of relu, swish; got 'gelu'");
}

namespace {

// A program's own model: one options type with its own key.
struct ProbeModel : mlo::nn::ModelOptionsFor<ProbeModel> {
  static constexpr const char* kName = "probe_for_test";
  int64_t width = 3;
  void visit(mlo::Fields& f) override { f("width", width, mlo::at_least(1)); }
  std::shared_ptr<torch::nn::Module> make(const mlo::nn::ModelInput& in) const override {
    return torch::nn::Sequential(torch::nn::Flatten(),
                                 torch::nn::Linear(in.channels * in.image_size * in.image_size,
                                                   width),
                                 torch::nn::Linear(width, in.num_classes))
        .ptr();
  }
};

// Another type under a name taken by ProbeModel.
struct OtherProbe : ProbeModel {};

}  // namespace

TEST_CASE("Model registry: a program's own model, the rule for names, and unknown names",
          "[nn]") {
  REQUIRE(mlo::nn::detail::register_model_type<ProbeModel>(__FILE__, __LINE__));
  // The same type again: a no-op.
  REQUIRE(mlo::nn::detail::register_model_type<ProbeModel>(__FILE__, __LINE__));
  mlo::nn::ModelConfig config("probe_for_test");
  CHECK(parameter_count(*config.make({1, 4, 3})) == (16 * 3 + 3) + (3 * 3 + 3));
  CHECK_THROWS_WITH(mlo::nn::ModelConfig("vgg"),
                    Contains("unknown model 'vgg'; registered models: cnn, mwn, probe_for_test, "
                             "resnet32, resnet50"));
  // Another type under a taken name: the name becomes an error naming both places.
  REQUIRE(mlo::nn::register_model(
      "probe_for_test", std::type_index(typeid(OtherProbe)),
      [] { return std::make_shared<OtherProbe>(); }, "other.cpp:1"));
  CHECK_THROWS_WITH(mlo::nn::ModelConfig("probe_for_test"),
                    Contains("the model 'probe_for_test' is registered twice, by two different "
                             "types") &&
                        Contains("other.cpp:1"));
}

}  // namespace model_registry_test
