// Tests of mlo::hypergrad::CG against the quadratic closed form B^T A^{-1} v.

#include <mlo/hypergrad.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

namespace cg_test {

using mlo::testing::Quadratic;
using mlo::testing::relative_error;

namespace {

torch::Tensor cg(Quadratic& q, int64_t iterations, double alpha) {
  mlo::hypergrad::CG method(mlo::CGOptions().iterations(iterations).alpha(alpha));
  const auto out = method.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 1);
  REQUIRE_FALSE(out[0].requires_grad());
  return out[0];
}

}  // namespace

TEST_CASE("CG: converges to the closed-form inverse HVP for every alpha", "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig());
  const double alpha = GENERATE(0.1, 1.0);
  CAPTURE(alpha);
  const double err = relative_error(cg(q, q.n, alpha), q.exact());
  CAPTURE(err);
  CHECK(err < 1e-4);
}

TEST_CASE("CG: alpha only rescales the system, so results agree for alpha 0.1 and 1",
          "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/4);
  // Also before convergence (2 steps), where mixing alpha H and H would give other iterates.
  const int64_t iterations = GENERATE(2, 5);
  CAPTURE(iterations);
  const torch::Tensor small = cg(q, iterations, 0.1);
  const torch::Tensor one = cg(q, iterations, 1.0);
  const double diff = relative_error(small, one);
  CAPTURE(small, one, diff);
  CHECK(diff < 1e-10);
}

TEST_CASE("CG: extra iterations after convergence stay finite and exact", "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/5);
  const torch::Tensor out = cg(q, 50, 1.0);
  CHECK(torch::isfinite(out).all().item<bool>());
  const double err = relative_error(out, q.exact());
  CAPTURE(err);
  CHECK(err < 1e-8);
}

TEST_CASE("CG: the error decreases with iterations on an ill-conditioned problem", "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/6, /*n=*/20, /*m=*/3,
                                /*min_eigenvalue=*/0.01, /*max_eigenvalue=*/1.0);
  const double err2 = relative_error(cg(q, 2, 1.0), q.exact());
  const double err20 = relative_error(cg(q, 20, 1.0), q.exact());
  CAPTURE(err2, err20);
  CHECK(err20 < err2);
  CHECK(err20 < 1e-4);
}

TEST_CASE("CG: zero vector, parameters unchanged, unused upper parameter", "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/7, 5, 3, 0.5, 2.0,
                                /*unused_upper_parameter=*/true);
  const torch::Tensor w_before = q.lower->w().detach().clone();
  mlo::hypergrad::CG method(mlo::CGOptions().iterations(5));

  const auto zero = method.apply({torch::zeros_like(q.v)}, *q.lower_level, *q.upper_level);
  REQUIRE(zero.size() == 2);
  CHECK(zero[0].abs().max().item<double>() == 0.0);

  const auto out = method.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 2);
  CHECK(torch::equal(q.lower->w().detach(), w_before));
  CHECK(out[1].abs().max().item<double>() == 0.0);
  CHECK(relative_error(out[0], q.exact()) < 1e-8);
}

TEST_CASE("CG: rejects bad options", "[hypergrad]") {
  using mlo::CGOptions;
  CHECK_THROWS_AS(mlo::hypergrad::CG(mlo::CGOptions().iterations(0)),
                  mlo::Error);
  CHECK_THROWS_AS(mlo::hypergrad::CG(mlo::CGOptions().alpha(-1)),
                  mlo::Error);
}

TEST_CASE("CG: diagnostics say whether it stopped early, met negative curvature or fell back",
          "[hypergrad][diagnostics]") {
  SECTION("positive definite: exact within dim(w) steps, then it stops") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/8);
    mlo::hypergrad::CG method(mlo::CGOptions().iterations(50));
    method.apply({q.v}, *q.lower_level, *q.upper_level);
    const mlo::Metrics m = method.diagnostics();
    INFO(mlo::format_all(m));
    CHECK(m.at("stopped_early") == 1);
    CHECK(m.at("iterations") >= q.n - 1);
    CHECK(m.at("iterations") <= q.n + 1);  // n in exact arithmetic
    CHECK(m.at("residual") < 1e-13);
    CHECK(m.at("negative_curvature") == 0);
    CHECK(m.at("fell_back") == 0);
    CHECK(m.count("jvp_fell_back") == 0);
  }
  SECTION("ill-conditioned, two steps: all taken, the residual not gone") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig(), 6, 20, 3, 0.01, 1.0);
    mlo::hypergrad::CG two(mlo::CGOptions().iterations(2));
    two.apply({q.v}, *q.lower_level, *q.upper_level);
    mlo::hypergrad::CG ten(mlo::CGOptions().iterations(10));
    ten.apply({q.v}, *q.lower_level, *q.upper_level);
    INFO(mlo::format_all(two.diagnostics()) + " | " + mlo::format_all(ten.diagnostics()));
    CHECK(two.diagnostics().at("iterations") == 2);
    CHECK(two.diagnostics().at("stopped_early") == 0);
    CHECK(two.diagnostics().at("residual") > 1e-3);
    CHECK(two.diagnostics().at("residual") < 1.0);
    CHECK(ten.diagnostics().at("residual") < two.diagnostics().at("residual"));
  }
  SECTION("negative definite: the first direction stops it and x = v, DARTS's B^T v") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig(), 9, 5, 3, -2.0, -0.5);
    mlo::hypergrad::CG method(mlo::CGOptions().iterations(5));
    const auto out = method.apply({q.v}, *q.lower_level, *q.upper_level);
    const mlo::Metrics m = method.diagnostics();
    INFO(mlo::format_all(m));
    CHECK(m.at("iterations") == 0);
    CHECK(m.at("negative_curvature") == 1);
    CHECK(m.at("fell_back") == 1);
    CHECK(m.at("stopped_early") == 0);
    CHECK(m.at("residual") == 1);
    CHECK(relative_error(out[0], q.b.t().mv(q.v)) < 1e-12);
  }
  SECTION("mode auto reports whether reverse mode took the products") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig(), 10);
    mlo::hypergrad::CG method(mlo::CGOptions().iterations(5).mode(mlo::HvpMode::kAuto));
    method.apply({q.v}, *q.lower_level, *q.upper_level);
    // (the quadratic's products have forward-mode formulas on every LibTorch)
    CHECK(method.diagnostics().at("jvp_fell_back") == 0);
  }
}

}  // namespace cg_test
