// Tests of mlo::hypergrad::Darts: its finite-difference formula and the quadratic closed form.

#include <mlo/hypergrad.h>
#include <mlo/memory/meter.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <support/method_options.h>

#include <catch2/catch.hpp>

namespace darts_test {

using mlo::testing::Quadratic;

namespace {

// grad_lambda L at w = w0 + step * v, computed here independently of the library.
torch::Tensor lambda_grad_at(Quadratic& q, const torch::Tensor& w0, double step) {
  {
    torch::NoGradGuard no_grad;
    q.lower->w().copy_(w0 + step * q.v);
  }
  const torch::Tensor lambda = q.upper->lambda();
  const torch::Tensor loss = q.lower->training_step(mlo::Batch());
  return torch::autograd::grad({loss}, {lambda})[0].detach();
}

}  // namespace

TEST_CASE("Darts: equals its finite-difference formula and the quadratic closed form",
          "[hypergrad]") {
  const double alpha = GENERATE(0.01, 0.5);
  CAPTURE(alpha);
  Quadratic q = Quadratic::make(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(alpha)));
  const torch::Tensor w_before = q.lower->w().detach().clone();

  mlo::hypergrad::Darts darts(mlo::test::options_of<mlo::DartsOptions>(q.lower->config()));
  const auto out = darts.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 1);
  REQUIRE_FALSE(out[0].requires_grad());

  SECTION("lower parameters are restored bit for bit") {
    CHECK(torch::equal(q.lower->w().detach(), w_before));
    CHECK_FALSE(q.lower->w().grad().defined());
    CHECK_FALSE(q.upper->lambda().grad().defined());
  }

  SECTION("matches (g- - g+) / 2eps computed in the test, tolerance 1e-6") {
    const double eps = alpha / q.v.norm().item<double>();
    const torch::Tensor g_plus = lambda_grad_at(q, w_before, eps);
    const torch::Tensor g_minus = lambda_grad_at(q, w_before, -eps);
    const torch::Tensor expected = (g_minus - g_plus) / (2 * eps);
    for (int64_t i = 0; i < q.m; ++i) {
      INFO("index " << i);
      CHECK(out[0][i].item<double>() == Approx(expected[i].item<double>()).margin(1e-6));
    }
  }

  SECTION("is exact on a quadratic: B^T v, tolerance 1e-6") {
    const torch::Tensor expected = q.b.t().mv(q.v);
    for (int64_t i = 0; i < q.m; ++i) {
      INFO("index " << i << ": got " << out[0][i].item<double>() << ", expected "
                    << expected[i].item<double>());
      CHECK(out[0][i].item<double>() == Approx(expected[i].item<double>()).margin(1e-6));
    }
  }
}

TEST_CASE("Darts: a zero vector gives zeros and an unused upper parameter gets zeros",
          "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig().method(mlo::DartsOptions()), /*seed=*/1,
                                /*n=*/5, /*m=*/3, 0.5, 2.0, /*unused_upper_parameter=*/true);
  mlo::hypergrad::Darts darts(mlo::test::options_of<mlo::DartsOptions>(q.lower->config()));

  const auto zero = darts.apply({torch::zeros_like(q.v)}, *q.lower_level, *q.upper_level);
  REQUIRE(zero.size() == 2);
  CHECK(zero[0].abs().max().item<double>() == 0.0);
  CHECK(zero[1].abs().max().item<double>() == 0.0);

  const auto out = darts.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 2);
  CHECK(out[1].sizes() == q.upper->parameters()[1].sizes());
  CHECK(out[1].abs().max().item<double>() == 0.0);
  CHECK(mlo::testing::relative_error(out[0], q.b.t().mv(q.v)) < 1e-10);
}

TEST_CASE("Darts: restores the lower parameters when the loss throws", "[hypergrad]") {
  struct Throwing : mlo::testing::QuadraticLower {
    using QuadraticLower::QuadraticLower;
    torch::Tensor training_step(const mlo::Batch&) override { throw std::runtime_error("boom"); }
  };
  Quadratic q = Quadratic::make(mlo::ProblemConfig());
  Throwing lower("throwing");
  lower.module(std::make_shared<mlo::testing::ParameterModule>(
      std::vector<std::pair<std::string, torch::Tensor>>{{"w", q.lower->w().detach()}}));
  const torch::Tensor w_before = lower.w().detach().clone();
  mlo::hypergrad::Darts darts(mlo::test::options_of<mlo::DartsOptions>(lower.config()));
  const auto lower_level = mlo::testing::make_level(lower);
  CHECK_THROWS_AS(darts.apply({q.v}, *lower_level, *q.upper_level), std::runtime_error);
  CHECK(torch::equal(lower.w().detach(), w_before));
}

TEST_CASE("Darts: rejects a non-positive alpha", "[hypergrad]") {
  CHECK_THROWS_AS(mlo::hypergrad::Darts(mlo::DartsOptions().alpha(0)),
                  mlo::Error);
}

TEST_CASE("Darts: the in-place restore gives the same result without a copy of the parameters",
          "[hypergrad][memory]") {
  Quadratic exact = Quadratic::make(mlo::ProblemConfig().method(mlo::DartsOptions()),
                                    /*seed=*/0, /*n=*/512, /*m=*/3);
  Quadratic in_place = Quadratic::make(
      mlo::ProblemConfig().method(mlo::DartsOptions().exact_restore(false)), /*seed=*/0,
      /*n=*/512, /*m=*/3);
  REQUIRE(torch::equal(exact.lower->w(), in_place.lower->w()));
  const torch::Tensor w_before = in_place.lower->w().detach().clone();

  auto peak = [](Quadratic& q) {
    mlo::memory::MemoryMeter meter(c10::Device(c10::kCPU));
    mlo::memory::MemoryMeter::Active on(meter);
    auto scope = meter.scope("test", "apply");
    mlo::hypergrad::Darts darts(mlo::test::options_of<mlo::DartsOptions>(q.lower->config()));
    const auto out = darts.apply({q.v}, *q.lower_level, *q.upper_level);
    return std::make_pair(out[0], scope.close());
  };
  const auto [out_exact, peak_exact] = peak(exact);
  const auto [out_in_place, peak_in_place] = peak(in_place);
  // Stepping forth and back rounds: a few ulps of w, and the same hypergradient to 1e-9.
  CHECK((in_place.lower->w() - w_before).abs().max().item<double>() <= 1e-14);
  CHECK((out_in_place - out_exact).abs().max().item<double>() <= 1e-9);
  // Exactly one copy of w (512 doubles) less at the peak.
  CHECK(peak_exact - peak_in_place == 512 * 8);
}

}  // namespace darts_test
