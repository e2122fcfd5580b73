// Tests of mlo::nn::MWN: shape, range, parameter count, gradients, input checks.

#include <mlo/base/error.h>
#include <mlo/nn/mwn.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

namespace mwn_test {

TEST_CASE("MWN: [N, 1] losses to [N, 1] weights in (0, 1)", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::MWN mwn;  // hidden 100
  CHECK(mwn->options.hidden() == 100);
  const torch::Tensor losses = torch::rand({7, 1}) * 5;
  const torch::Tensor w = mwn(losses);
  REQUIRE(w.sizes() == torch::IntArrayRef({7, 1}));
  CHECK((w > 0).all().item<bool>());
  CHECK((w < 1).all().item<bool>());

  // Linear(1, h) + Linear(h, 1) with biases: 3h + 1.
  int64_t n = 0;
  for (const auto& p : mwn->parameters()) n += p.numel();
  CHECK(n == 3 * 100 + 1);

  mlo::nn::MWN small(mlo::nn::MWNOptions(8));
  n = 0;
  for (const auto& p : small->parameters()) n += p.numel();
  CHECK(n == 3 * 8 + 1);
}

TEST_CASE("MWN: gradients reach every parameter", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::MWN mwn(mlo::nn::MWNOptions().hidden(16));
  mwn(torch::rand({5, 1})).sum().backward();
  for (const auto& item : mwn->named_parameters()) {
    CAPTURE(item.key());
    REQUIRE(item.value().grad().defined());
  }
}

TEST_CASE("MWN: bad shapes and options throw mlo::Error", "[nn]") {
  mlo::nn::MWN mwn(mlo::nn::MWNOptions(4));
  CHECK_THROWS_WITH(mwn(torch::rand({5})), Catch::Contains("[N, 1]"));
  CHECK_THROWS_AS(mwn(torch::rand({5, 2})), mlo::Error);
  CHECK_THROWS_WITH(mlo::nn::MWN(mlo::nn::MWNOptions(0)), Catch::Contains("hidden"));
}

}  // namespace mwn_test
