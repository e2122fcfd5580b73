// The model registry: the built-in models for an input shape, a program's own model, unknown
// names.
#include <mlo/base/error.h>
#include <mlo/nn/chain.h>
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
    mlo::nn::ModelSpec spec;
    spec.name = name;
    auto model = mlo::nn::make_model(spec, {1, 28, 7});
    auto chain = std::dynamic_pointer_cast<mlo::nn::ChainImpl>(model);
    REQUIRE(chain);
    chain->eval();
    CHECK(chain->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef({2, 7}));
  }
  // MWN: 1 -> hidden -> 1 with biases: 3 * hidden + 1 parameters.
  mlo::nn::ModelSpec mwn;
  mwn.name = "mwn";
  mwn.hidden = 7;
  CHECK(parameter_count(*mlo::nn::make_model(mwn, {})) == 22);
  // The CNN's batch norm key changes the model.
  mlo::nn::ModelSpec plain, with_bn;
  with_bn.batch_norm = true;
  CHECK(parameter_count(*mlo::nn::make_model(with_bn, {})) >
        parameter_count(*mlo::nn::make_model(plain, {})));
}

TEST_CASE("Model registry: a program's own model, and unknown names", "[nn]") {
  REQUIRE(mlo::nn::register_model("probe_for_test", [](const mlo::nn::ModelSpec&,
                                                       const mlo::nn::ModelInput& in) {
    return std::static_pointer_cast<torch::nn::Module>(
        torch::nn::Linear(in.channels * in.image_size * in.image_size, in.num_classes).ptr());
  }));
  mlo::nn::ModelSpec spec;
  spec.name = "probe_for_test";
  CHECK(parameter_count(*mlo::nn::make_model(spec, {1, 4, 3})) == 16 * 3 + 3);
  spec.name = "vgg";
  CHECK_THROWS_WITH(mlo::nn::make_model(spec, {}),
                    Contains("unknown model 'vgg'; registered models: cnn, mwn, probe_for_test, "
                             "resnet32, resnet50"));
}

}  // namespace model_registry_test
