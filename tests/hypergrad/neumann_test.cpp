// Tests of mlo::hypergrad::Neumann against the quadratic closed form B^T A^{-1} v.

#include <mlo/hypergrad.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace neumann_test {

using mlo::testing::Quadratic;
using mlo::testing::relative_error;

namespace {

torch::Tensor neumann(Quadratic& q, int64_t iterations, double alpha) {
  mlo::hypergrad::Neumann method(mlo::NeumannOptions().iterations(iterations).alpha(alpha));
  const auto out = method.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 1);
  REQUIRE_FALSE(out[0].requires_grad());
  return out[0];
}

}  // namespace

TEST_CASE("Neumann: converges to the closed-form inverse HVP", "[hypergrad]") {
  // Eigenvalues of A in [0.5, 2], alpha = 0.5: the error contracts by at most 0.75 per term.
  Quadratic q = Quadratic::make(mlo::ProblemConfig());
  const torch::Tensor exact = q.exact();

  SECTION("relative error < 1e-4 at 80 iterations") {
    const double err = relative_error(neumann(q, 80, 0.5), exact);
    CAPTURE(err);
    CHECK(err < 1e-4);
  }

  SECTION("the error decreases as iterations grow") {
    const std::vector<int64_t> ks{0, 2, 5, 10, 20, 40};
    double previous = 1e300;
    for (int64_t k : ks) {
      const double err = relative_error(neumann(q, k, 0.5), exact);
      INFO("iterations " << k << ": relative error " << err << ", previous " << previous);
      CHECK(err < previous);
      previous = err;
    }
  }

  SECTION("zero iterations is alpha * B^T v (H^{-1} ~ alpha I)") {
    const double err = relative_error(neumann(q, 0, 0.5), 0.5 * q.b.t().mv(q.v));
    CAPTURE(err);
    CHECK(err < 1e-12);
  }
}

TEST_CASE("Neumann: matches the truncated series computed in closed form", "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/3);
  const double alpha = 0.3;
  const int64_t k = 4;
  // p = alpha * sum_{j=0..k} (I - alpha A)^j v
  const torch::Tensor m = torch::eye(q.n, q.a.options()) - alpha * q.a;
  torch::Tensor term = q.v.clone();
  torch::Tensor sum = q.v.clone();
  for (int64_t j = 0; j < k; ++j) {
    term = m.mv(term);
    sum = sum + term;
  }
  const torch::Tensor expected = q.b.t().mv(alpha * sum);
  const double err = relative_error(neumann(q, k, alpha), expected);
  CAPTURE(err);
  CHECK(err < 1e-12);
}

TEST_CASE("Neumann: leaves the lower parameters unchanged and zeros unused upper parameters",
          "[hypergrad]") {
  Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/2, 5, 3, 0.5, 2.0,
                                /*unused_upper_parameter=*/true);
  const torch::Tensor w_before = q.lower->w().detach().clone();
  mlo::hypergrad::Neumann method(mlo::NeumannOptions().iterations(3));
  const auto out = method.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 2);
  CHECK(torch::equal(q.lower->w().detach(), w_before));
  CHECK_FALSE(q.lower->w().grad().defined());
  CHECK_FALSE(q.upper->lambda().grad().defined());
  CHECK(out[1].abs().max().item<double>() == 0.0);
}

TEST_CASE("Neumann: rejects bad options", "[hypergrad]") {
  using mlo::NeumannOptions;
  CHECK_THROWS_AS(
      mlo::hypergrad::Neumann(mlo::NeumannOptions().iterations(-1)),
      mlo::Error);
  CHECK_THROWS_AS(mlo::hypergrad::Neumann(mlo::NeumannOptions().alpha(0)),
                  mlo::Error);
}

TEST_CASE("Neumann: diagnostics give the last term's size and negative curvature",
          "[hypergrad][diagnostics]") {
  const int64_t k = 4;
  const double alpha = 0.5;
  SECTION("positive definite: the last term is (I - alpha A)^K v") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig(), /*seed=*/11);
    mlo::hypergrad::Neumann method(mlo::NeumannOptions().iterations(k).alpha(alpha));
    method.apply({q.v}, *q.lower_level, *q.upper_level);
    const torch::Tensor step = torch::eye(q.n, q.a.options()) - alpha * q.a;
    const double expected = torch::linalg_matrix_power(step, k).mv(q.v).norm().item<double>() /
                            q.v.norm().item<double>();
    const mlo::Metrics m = method.diagnostics();
    INFO(mlo::format_all(m));
    CAPTURE(expected);
    CHECK(m.at("term_ratio") == Approx(expected).epsilon(1e-12));
    CHECK(m.at("term_ratio") < 1.0);
    CHECK(m.at("iterations") == k);
    CHECK(m.at("negative_curvature") == 0);
  }
  SECTION("negative definite: every term grows, and says so") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig(), 12, 5, 3, -2.0, -0.5);
    mlo::hypergrad::Neumann method(mlo::NeumannOptions().iterations(k).alpha(alpha));
    method.apply({q.v}, *q.lower_level, *q.upper_level);
    const mlo::Metrics m = method.diagnostics();
    INFO(mlo::format_all(m));
    CHECK(m.at("negative_curvature") == 1);
    // |1 - alpha h| >= 1.25 for h in [-2, -0.5]: the series diverges.
    CHECK(m.at("term_ratio") > std::pow(1.25, k) * 0.999);
  }
}

}  // namespace neumann_test
