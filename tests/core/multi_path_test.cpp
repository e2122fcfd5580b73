// Hypergradients in graphs that are not a chain, against closed forms on scalar quadratics.
//
// Two parents P and Q above one lower problem l:
//   L_l(l; p, q) = a/2 l^2 - b l p - c l q,   L_P(p; l) = 1/2 (l - g)^2,   L_Q(q; l) = 1/2 (l - h)^2
//   P's hypergradient: -(d2 L_l / dp dl) H^-1 v = (b / a)(l - g); Q's: (c / a)(l - h).
// One parent T above two lower problems x and y:
//   L_x(x; t) = a/2 x^2 - b x t,   L_y(y; t) = d/2 y^2 - e y t,   L_T(t; x, y) = 1/2 (x - g)^2 + 1/2 (y - h)^2
//   T's gradient (no direct part) sums its two paths: (b / a)(x - g) + (e / d)(y - h).
// One CG step solves a 1-dimensional system exactly; DARTS takes H^-1 = I (drop the divisions).
#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace multi_path_test {

namespace {

constexpr double a = 2.0, b = 0.7, c = -0.3, d = 1.5, e = 0.4, g = 3.0, h = -1.0;

struct ScalarImpl : torch::nn::Module {
  explicit ScalarImpl(double value) {
    w = register_parameter("w", torch::full({1}, value, torch::kDouble));
  }
  torch::Tensor w;
};
TORCH_MODULE(Scalar);

// A scalar problem whose loss is given as a function; it records the gradient it steps with and
// the values of the scalars that the closed form needs at that moment.
struct Level : mlo::Problem {
  Level(std::string name, mlo::ProblemConfig config, double init,
        std::function<torch::Tensor()> loss_fn = {})
      : mlo::Problem(std::move(name), std::move(config)), loss(std::move(loss_fn)) {
    module(Scalar(init)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  }
  torch::Tensor w() const { return module_as<ScalarImpl>()->w; }
  double value() const { return w().item<double>(); }
  torch::Tensor training_step(const mlo::Batch&) override { return loss(); }
  void grad_callback(std::vector<torch::Tensor>& grads) override {
    recorded.push_back(grads[0].item<double>());
    if (expected) expectations.push_back(expected());
  }
  std::function<torch::Tensor()> loss;
  std::function<double()> expected;  // the closed-form gradient, evaluated when stepping
  std::vector<double> recorded, expectations;
};

void check_recorded(const Level& p, size_t steps) {
  REQUIRE(p.recorded.size() == steps);
  REQUIRE(p.expectations.size() == steps);
  for (size_t i = 0; i < steps; ++i) {
    INFO(p.name() << " step " << i + 1 << ": gradient " << p.recorded[i] << ", closed form "
                  << p.expectations[i]);
    CHECK(p.recorded[i] == Approx(p.expectations[i]).epsilon(1e-8).margin(1e-12));
  }
}

void two_parents(const mlo::ProblemConfig& method, bool exact) {
  std::shared_ptr<Level> l, P, Q;
  l = std::make_shared<Level>("lower", mlo::ProblemConfig(method).unroll_steps(2), 0.2, [&] {
    return (0.5 * a * l->w().pow(2) - b * l->w() * P->w() - c * l->w() * Q->w()).sum();
  });
  P = std::make_shared<Level>("P", mlo::ProblemConfig(), 0.5,
                              [&] { return (0.5 * (l->w() - g).pow(2)).sum(); });
  Q = std::make_shared<Level>("Q", mlo::ProblemConfig(), -0.5,
                              [&] { return (0.5 * (l->w() - h).pow(2)).sum(); });
  P->expected = [&] { return (exact ? b / a : b) * (l->value() - g); };
  Q->expected = [&] { return (exact ? c / a : c) * (l->value() - h); };
  mlo::Engine engine(mlo::EngineConfig().train_iters(6));
  engine.add(P).add(Q).add(l).link(P, l).link(Q, l);
  engine.run();
  check_recorded(*P, 3);
  check_recorded(*Q, 3);
}

void two_children(const mlo::ProblemConfig& method, bool exact) {
  std::shared_ptr<Level> x, y, T;
  x = std::make_shared<Level>("x", mlo::ProblemConfig(method).unroll_steps(2), 0.2,
                              [&] { return (0.5 * a * x->w().pow(2) - b * x->w() * T->w()).sum(); });
  y = std::make_shared<Level>("y", mlo::ProblemConfig(method).unroll_steps(3), -0.4,
                              [&] { return (0.5 * d * y->w().pow(2) - e * y->w() * T->w()).sum(); });
  T = std::make_shared<Level>("T", mlo::ProblemConfig(), 0.5, [&] {
    return (0.5 * (x->w() - g).pow(2) + 0.5 * (y->w() - h).pow(2)).sum();
  });
  T->expected = [&] {
    return (exact ? b / a : b) * (x->value() - g) + (exact ? e / d : e) * (y->value() - h);
  };
  // x is ready at 2, 4, 6, ...; y at 3, 6, 9, ...: T steps once both are, at 3, 6, 9 and 12.
  mlo::Engine engine(mlo::EngineConfig().train_iters(12));
  engine.add(T).add(x).add(y).link(T, x).link(T, y);
  engine.run();
  check_recorded(*T, 4);
}

}  // namespace

TEST_CASE("Two parents: each gets its own closed-form hypergradient (CG, exact)",
          "[core][hypergrad]") {
  two_parents(mlo::ProblemConfig().method(mlo::CGOptions().iterations(1).alpha(0.5)), true);
}

TEST_CASE("Two parents: each gets its own closed-form hypergradient (DARTS, H^-1 = I)",
          "[core][hypergrad]") {
  two_parents(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(0.01)), false);
}

TEST_CASE("Two children: the parent sums both paths (CG, exact)", "[core][hypergrad]") {
  two_children(mlo::ProblemConfig().method(mlo::CGOptions().iterations(1).alpha(0.5)), true);
}

TEST_CASE("Two children: the parent sums both paths (Neumann, converged)", "[core][hypergrad]") {
  // alpha * sum_k (1 - alpha a)^k -> 1/a; 60 terms reach 1e-12 for alpha a <= 0.75.
  two_children(mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(60).alpha(0.5)), true);
}

}  // namespace multi_path_test
