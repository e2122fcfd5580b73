// A non-quadratic check: L2-regularized logistic regression, where every method is compared with
// the implicit hypergradient built from an explicit Hessian.
//
//   L(w, b, lambda) = mean_i BCE(x_i . w + b, y_i) + 1/2 sum_j exp(lambda_j) w_j^2
//   exact = -J^T H^{-1} v,  H = d^2 L / d(w, b)^2 (4 x 4),  J = d^2 L / d(w, b) dlambda (4 x 3).
// The lower parameters are two tensors (w: 3, b: 1), so the methods' multi-tensor paths run too.

#include <mlo/base/error.h>
#include <mlo/hypergrad.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace logistic_test {

using mlo::testing::ParameterModule;
using mlo::testing::relative_error;

namespace {

using Params = std::vector<std::pair<std::string, torch::Tensor>>;

struct Hyper : mlo::Problem {
  using mlo::Problem::Problem;
  torch::Tensor log_decay() const { return module_as<ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override { return log_decay().sum(); }
};

// Trains on a fixed data set held by the problem (apply() needs no Engine or batch stream).
struct Classifier : mlo::Problem {
  using mlo::Problem::Problem;
  Hyper* hyper = nullptr;
  torch::Tensor x, y;
  torch::Tensor training_step(const mlo::Batch&) override {
    const auto& p = module_as<ParameterModule>()->tensors;
    const torch::Tensor fit = torch::binary_cross_entropy_with_logits(x.mv(p[0]) + p[1], y);
    return fit + 0.5 * (hyper->log_decay().exp() * p[0] * p[0]).sum();
  }
};

struct Setup {
  std::shared_ptr<Hyper> hyper;
  std::shared_ptr<Classifier> classifier;
  // The two problems as levels (what a method is applied to).
  std::shared_ptr<mlo::detail::LevelRuntime> hyper_level;
  std::shared_ptr<mlo::detail::LevelRuntime> classifier_level;
  std::vector<torch::Tensor> v;  // over (w, b)
  torch::Tensor h;               // 4 x 4
  torch::Tensor j;               // 4 x 3
  torch::Tensor exact;           // 3

  Setup() {
    torch::manual_seed(11);
    const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    hyper = std::make_shared<Hyper>("hyper");
    hyper->module(
        std::make_shared<ParameterModule>(Params{{"log_decay", 0.3 * torch::randn({3}, opts)}}));
    classifier = std::make_shared<Classifier>("classifier");
    classifier->module(std::make_shared<ParameterModule>(
        Params{{"weight", torch::randn({3}, opts)}, {"bias", torch::randn({1}, opts)}}));
    classifier->hyper = hyper.get();
    classifier->x = torch::randn({40, 3}, opts);
    classifier->y = (classifier->x.mv(torch::randn({3}, opts)) > 0).to(torch::kFloat64);
    v = {torch::randn({3}, opts), torch::randn({1}, opts)};
    hyper_level = mlo::testing::make_level(*hyper);
    classifier_level = mlo::testing::make_level(*classifier);

    // Explicit H and J with double-backward loops.
    const auto params = classifier->parameters();
    const auto lambda = hyper->parameters();
    const torch::Tensor loss = classifier_level->loss();
    const auto g = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/true,
                                         /*create_graph=*/true);
    const torch::Tensor g_flat = torch::cat({g[0], g[1]});
    h = torch::zeros({4, 4}, opts);
    j = torch::zeros({4, 3}, opts);
    for (int64_t i = 0; i < 4; ++i) {
      const auto row = torch::autograd::grad({g_flat[i]}, params, {}, /*retain_graph=*/true);
      h[i] = torch::cat({row[0], row[1]});
      j[i] = torch::autograd::grad({g_flat[i]}, lambda, {}, /*retain_graph=*/true)[0];
    }
    const torch::Tensor v_flat = torch::cat({v[0], v[1]});
    exact = -j.t().mv(torch::linalg_solve(h, v_flat.unsqueeze(1)).squeeze(1));
  }

  torch::Tensor run(const mlo::ProblemConfig& config) {
    const torch::Tensor w_before = torch::cat(classifier->parameters()).detach().clone();
    auto method = config.method().make();
    const auto out = method->apply(v, *classifier_level, *hyper_level);
    REQUIRE(out.size() == 1);
    REQUIRE_FALSE(out[0].requires_grad());
    CHECK(torch::equal(torch::cat(classifier->parameters()).detach(), w_before));
    return out[0];
  }
};

}  // namespace

TEST_CASE("Logistic regression: Neumann and CG match the explicit-Hessian hypergradient",
          "[hypergrad]") {
  Setup s;
  const torch::Tensor eig = torch::linalg_eigvalsh(s.h);
  const double lo = eig.min().item<double>();
  const double hi = eig.max().item<double>();
  CAPTURE(lo, hi);
  REQUIRE(lo > 0);

  SECTION("Neumann with alpha = 1 / lambda_max, enough terms for a 1e-8 series error") {
    const double alpha = 1.0 / hi;
    const auto iterations =
        static_cast<int64_t>(std::ceil(std::log(1e-8) / std::log(1.0 - lo / hi)));
    CAPTURE(alpha, iterations);
    const double err = relative_error(
        s.run(
            mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(iterations).alpha(alpha))),
        s.exact);
    CAPTURE(err);
    CHECK(err < 1e-4);
  }

  SECTION("CG with dim(w) = 4 steps, for alpha 0.1 and 1") {
    const double alpha = GENERATE(0.1, 1.0);
    CAPTURE(alpha);
    const double err = relative_error(
        s.run(mlo::ProblemConfig().method(mlo::CGOptions().iterations(4).alpha(alpha))), s.exact);
    CAPTURE(err);
    CHECK(err < 1e-6);
  }

  SECTION("DARTS matches -J^T v (its H^{-1} ~ I) up to O(eps^2)") {
    const torch::Tensor expected = -s.j.t().mv(torch::cat({s.v[0], s.v[1]}));
    const double err = relative_error(
        s.run(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4))), expected);
    CAPTURE(err);
    CHECK(err < 1e-6);
  }
}

TEST_CASE("Every method treats an undefined entry of v as zeros", "[hypergrad]") {
  const std::string method = GENERATE(as<std::string>(), "darts", "neumann", "cg");
  CAPTURE(method);
  const mlo::ProblemConfig config = mlo::ProblemConfig().method(method);
  Setup s;
  s.v[1] = torch::zeros_like(s.v[1]);
  const torch::Tensor with_zeros = s.run(config);
  s.v[1] = torch::Tensor();
  const torch::Tensor with_undefined = s.run(config);
  CHECK(torch::equal(with_zeros, with_undefined));
}

TEST_CASE("Every method rejects a vector with the wrong number of tensors", "[hypergrad]") {
  const std::string method = GENERATE(as<std::string>(), "darts", "neumann", "cg");
  CAPTURE(method);
  Setup s;
  s.v.pop_back();
  CHECK_THROWS_AS(s.run(mlo::ProblemConfig().method(method)), mlo::Error);
}

}  // namespace logistic_test
