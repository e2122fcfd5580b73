// The functional call: a module's forward at given parameters equals the forward of a copy of
// the module holding those values (value, gradients with respect to the values and the input,
// dropout included), differentiates a look-ahead w - eta g(w) through g's graph as the
// hand-written forward does, and leaves the module as it was (values, storage, grad, buffers),
// also when the forward throws.
#include <mlo/base/error.h>
#include <mlo/core/functional_call.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

namespace functional_call_test {

using Catch::Matchers::Contains;

namespace {

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(double dropout = 0.0) {
    first = register_module("first", torch::nn::Linear(4, 5));
    second = register_module("second", torch::nn::Linear(5, 2));
    drop = register_module("drop", torch::nn::Dropout(dropout));
    to(torch::kDouble);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return second->forward(drop->forward(torch::tanh(first->forward(x))));
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Mlp);

// Leaves holding the module's parameters moved by `shift` (other values than the module's).
std::vector<torch::Tensor> shifted(const Mlp& mlp, double shift) {
  std::vector<torch::Tensor> out;
  for (const auto& p : mlp->parameters()) {
    out.push_back((p.detach() + shift * torch::ones_like(p)).requires_grad_(true));
  }
  return out;
}

// A copy of `mlp` whose parameters hold `values`.
Mlp copy_with(const Mlp& mlp, const std::vector<torch::Tensor>& values) {
  Mlp copy(0.0);
  torch::NoGradGuard no_grad;
  const auto from = mlp->parameters();
  auto to = copy->parameters();
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(values[i]);
  copy->drop->options.p(mlp->drop->options.p());
  copy->train(mlp->is_training());
  return copy;
}

std::vector<torch::Tensor> snapshot(const Mlp& mlp) {
  std::vector<torch::Tensor> out;
  for (const auto& p : mlp->parameters()) out.push_back(p.detach().clone());
  return out;
}

void require_unchanged(const Mlp& mlp, const std::vector<torch::Tensor>& before,
                       const std::vector<const void*>& storage) {
  const auto now = mlp->parameters();
  for (size_t i = 0; i < now.size(); ++i) {
    CHECK(torch::equal(now[i], before[i]));
    CHECK(now[i].data_ptr() == storage[i]);
    CHECK(now[i].is_leaf());
    CHECK(now[i].requires_grad());
    CHECK(!now[i].grad().defined());
  }
}

std::vector<const void*> storages(const Mlp& mlp) {
  std::vector<const void*> out;
  for (const auto& p : mlp->parameters()) out.push_back(p.data_ptr());
  return out;
}

}  // namespace

TEST_CASE("functional_call equals the forward of a copy holding the values, and leaves the "
          "module as it was",
          "[nn][functional]") {
  const double dropout = GENERATE(0.0, 0.3);
  torch::manual_seed(3);
  Mlp mlp(dropout);
  const auto x = torch::randn({6, 4}, torch::kDouble).requires_grad_(true);
  const auto before = snapshot(mlp);
  const auto storage = storages(mlp);
  const auto values = shifted(mlp, 0.25);

  torch::manual_seed(11);
  const auto out = mlo::functional_call(mlp.ptr(), values, x);
  const auto loss = out.pow(2).sum();
  const auto grads = torch::autograd::grad({loss}, {values[0], values[1], values[2], values[3], x});

  Mlp copy = copy_with(mlp, values);
  const auto x2 = x.detach().requires_grad_(true);
  torch::manual_seed(11);
  const auto out2 = copy->forward(x2);
  const auto loss2 = out2.pow(2).sum();
  auto leaves = copy->parameters();
  leaves.push_back(x2);
  const auto grads2 = torch::autograd::grad({loss2}, leaves);

  CHECK(torch::equal(out, out2));
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(grads[i], grads2[i], 1e-12, 1e-14));
  }
  require_unchanged(mlp, before, storage);
}

TEST_CASE("functional_call differentiates a look-ahead as the hand-written forward does",
          "[nn][functional]") {
  torch::manual_seed(5);
  Mlp mlp(0.0);
  const auto x = torch::randn({8, 4}, torch::kDouble);
  const auto y = torch::randn({8, 2}, torch::kDouble);
  const auto xv = torch::randn({5, 4}, torch::kDouble);
  const auto yv = torch::randn({5, 2}, torch::kDouble);
  const auto scale = torch::tensor({0.7}, torch::kDouble).requires_grad_(true);
  const auto before = snapshot(mlp);
  const auto storage = storages(mlp);

  // w' = w - 0.1 d/dw [scale * |f_w(x) - y|^2]; then |f_{w'}(xv) - yv|^2, differentiated with
  // respect to scale and w (through the graph of the inner gradient, which saved w itself).
  auto look_ahead = [&](const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>&
                            forward_at) {
    const auto w = mlp->parameters();
    const auto inner = (scale * (mlp->forward(x) - y).pow(2).sum()).sum();
    const auto g = torch::autograd::grad({inner}, w, {}, /*retain_graph=*/true,
                                         /*create_graph=*/true);
    std::vector<torch::Tensor> ahead;
    for (size_t i = 0; i < w.size(); ++i) ahead.push_back(w[i] - 0.1 * g[i]);
    const auto outer = (forward_at(ahead) - yv).pow(2).sum();
    auto inputs = w;
    inputs.push_back(scale);
    return torch::autograd::grad({outer}, inputs);
  };
  const auto by_call = look_ahead(
      [&](const std::vector<torch::Tensor>& ahead) {
        return mlo::functional_call(mlp.ptr(), ahead, xv);
      });
  const auto by_hand = look_ahead([&](const std::vector<torch::Tensor>& ahead) {
    namespace F = torch::nn::functional;
    const auto h = torch::tanh(F::linear(xv, ahead[0], ahead[1]));
    return F::linear(h, ahead[2], ahead[3]);
  });
  REQUIRE(by_call.size() == by_hand.size());
  for (size_t i = 0; i < by_call.size(); ++i) {
    INFO("gradient " << i);
    CHECK(by_call[i].abs().sum().item<double>() > 0);
    CHECK(torch::allclose(by_call[i], by_hand[i], 1e-12, 1e-14));
  }
  require_unchanged(mlp, before, storage);
}

TEST_CASE("functional_call puts back batch-norm statistics and the parameters on a throw, and "
          "refuses wrong values and a second derivative",
          "[nn][functional]") {
  torch::manual_seed(2);
  auto bn = torch::nn::BatchNorm1d(4);
  bn->to(torch::kDouble);
  bn->train();
  const auto mean = bn->running_mean.clone();
  const auto x = torch::randn({6, 4}, torch::kDouble);
  std::vector<torch::Tensor> values;
  for (const auto& p : bn->parameters()) values.push_back((p.detach() * 2).requires_grad_(true));
  const auto out = mlo::functional_call(bn, values, x);
  out.pow(2).sum().backward();
  CHECK(torch::equal(bn->running_mean, mean));
  CHECK(values[0].grad().defined());
  CHECK(!bn->parameters()[0].grad().defined());

  Mlp mlp(0.0);
  const auto before = snapshot(mlp);
  const auto storage = storages(mlp);
  CHECK_THROWS_AS(mlo::functional_call(*mlp, shifted(mlp, 1.0), x,
                                           [](const torch::Tensor&) -> torch::Tensor {
                                             throw std::runtime_error("inside the forward");
                                           }),
                  std::runtime_error);
  require_unchanged(mlp, before, storage);

  auto wrong = shifted(mlp, 1.0);
  wrong[2] = torch::zeros({3, 5}, torch::kDouble);
  CHECK_THROWS_WITH(mlo::functional_call(mlp.ptr(), wrong, x), Contains("second.weight"));
  wrong.pop_back();
  CHECK_THROWS_AS(mlo::functional_call(mlp.ptr(), wrong, x), mlo::Error);

  const auto ahead = shifted(mlp, 0.5);
  const auto y = mlo::functional_call(mlp.ptr(), ahead, x).pow(2).sum();
  CHECK_THROWS_AS(torch::autograd::grad({y}, ahead, {}, true, /*create_graph=*/true), mlo::Error);
  require_unchanged(mlp, before, storage);
}

}  // namespace functional_call_test
