// Tests of mlo::hypergrad::Sama: the optimizer Jacobian it applies (SGD with momentum closed
// forms; Adam/AdamW against autograd through the differentiable update), exactness of the
// finite difference on a quadratic, and a clear error for an optimizer it cannot precondition.
#include <mlo/core/engine.h>
#include <mlo/hypergrad.h>
#include <support/inner_steps.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <support/method_options.h>

#include <catch2/catch.hpp>

#include <sstream>

namespace sama_test {

using mlo::testing::Quadratic;
using mlo::testing::run_unroll;

namespace {

Quadratic make_quadratic() {
  return Quadratic::make(mlo::ProblemConfig().method(mlo::SamaOptions()));
}

// `q`'s lower level again, with both problems as its peers (as an engine makes it).
void with_peers(Quadratic& q) {
  q.lower_level = mlo::testing::make_level(*q.lower, {q.lower.get(), q.upper.get()});
}

void check_close(const torch::Tensor& got, const torch::Tensor& expected, double tolerance) {
  for (int64_t i = 0; i < expected.numel(); ++i) {
    INFO("index " << i << ": got " << got[i].item<double>() << ", expected "
                  << expected[i].item<double>());
    CHECK(got[i].item<double>() == Approx(expected[i].item<double>()).margin(tolerance));
  }
}

}  // namespace

TEST_CASE("Sama: SGD preconditioning is lr times the momentum factor", "[hypergrad][sama]") {
  struct Case {
    torch::optim::SGDOptions options;
    int64_t steps;
    double factor;  // J = lr * factor
  };
  const double lr = 0.1;
  const std::vector<Case> cases = {
      {torch::optim::SGDOptions(lr), 3, 1.0},
      {torch::optim::SGDOptions(lr).momentum(0.9).dampening(0.25), 1, 1.0},  // buffer created
      {torch::optim::SGDOptions(lr).momentum(0.9).dampening(0.25), 3, 0.75},
      {torch::optim::SGDOptions(lr).momentum(0.9).nesterov(true), 3, 1.9},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    Quadratic q = make_quadratic();
    q.lower->optimizer<torch::optim::SGD>(cases[k].options);
    mlo::hypergrad::Sama sama(mlo::test::options_of<mlo::SamaOptions>(q.lower->config()));
    with_peers(q);
    run_unroll(*q.lower_level, &sama, cases[k].steps);
    const auto direction = sama.precondition({q.v}, *q.lower_level);
    check_close(direction[0], q.v * (lr * cases[k].factor), 1e-14);
    // On a quadratic the central difference is exact: result = B^T J v.
    const auto out = sama.apply({q.v}, *q.lower_level, *q.upper_level);
    check_close(out[0], q.b.t().mv(q.v) * (lr * cases[k].factor), 1e-9);
  }
}

TEST_CASE("Sama: uses the learning rate of the step taken, not the one the schedule set after it",
          "[hypergrad][sama]") {
  const double lr = 0.1;
  Quadratic q = make_quadratic();
  q.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(lr));
  // The third step runs at lr; the schedule then drops the rate 10x for the fourth.
  q.lower->scheduler([](int64_t step) { return step < 3 ? 1.0 : 0.1; });
  mlo::hypergrad::Sama sama(mlo::test::options_of<mlo::SamaOptions>(q.lower->config()));
  with_peers(q);
  run_unroll(*q.lower_level, &sama, 3);
  const auto direction = sama.precondition({q.v}, *q.lower_level);
  check_close(direction[0], q.v * lr, 1e-14);
}

TEST_CASE("Sama: Adam/AdamW preconditioning equals the Jacobian of the update (autograd)",
          "[hypergrad][sama]") {
  const bool adamw = GENERATE(false, true);
  const bool amsgrad = GENERATE(false, true);
  CAPTURE(adamw, amsgrad);
  Quadratic q = make_quadratic();
  if (adamw) {
    q.lower->optimizer<torch::optim::AdamW>(
        torch::optim::AdamWOptions(0.05).weight_decay(0.1).amsgrad(amsgrad).eps(1e-3));
  } else {
    q.lower->optimizer<torch::optim::Adam>(
        torch::optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(amsgrad).eps(1e-3));
  }
  mlo::hypergrad::Sama sama(mlo::test::options_of<mlo::SamaOptions>(q.lower->config()));
  with_peers(q);
  run_unroll(*q.lower_level, &sama, 4);
  // The state before the last step and that step's gradient, to differentiate it here.
  const auto params = q.lower->parameters();
  mlo::hypergrad::DifferentiableOptimizer opt(q.lower->optimizer(), params, "lower");
  const mlo::hypergrad::OptimizerState before = opt.read_state(q.lower->optimizer(), params);
  const torch::Tensor lambda = q.upper->lambda().detach();
  const torch::Tensor grad = (q.a.mv(params[0].detach()) - q.b.mv(lambda)).requires_grad_(true);
  run_unroll(*q.lower_level, &sama, 1);  // the last step, which sama records
  const auto after = opt.step(before, {grad}, opt.learning_rates(q.lower->optimizer()));
  // The update u = w - w'; J v = d(u . v)/dg (J is diagonal).
  const torch::Tensor jv = -torch::autograd::grad({(after.params[0] * q.v).sum()}, {grad})[0];
  // The differentiable update reproduces the real optimizer's step.
  check_close(after.params[0].detach(), params[0].detach(), 1e-14);
  const auto direction = sama.precondition({q.v}, *q.lower_level);
  check_close(direction[0], jv, 1e-12);
  const auto out = sama.apply({q.v}, *q.lower_level, *q.upper_level);
  check_close(out[0], q.b.t().mv(jv), 1e-9);
}

TEST_CASE("Sama: an optimizer it cannot precondition fails at engine start", "[hypergrad][sama]") {
  Quadratic q = make_quadratic();
  q.lower->optimizer<torch::optim::RMSprop>(torch::optim::RMSpropOptions(0.01));
  q.upper->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  mlo::Engine engine;
  engine.add(q.upper).add(q.lower).link(q.upper, q.lower);
  CHECK_THROWS_WITH(engine.initialize(),
                    "problem 'lower': sama cannot precondition with this optimizer: its optimizer "
                    "(RMSprop) has no differentiable update rule; supported: exactly SGD (with "
                    "momentum, Nesterov, weight decay), Adam, AdamW");
  CHECK_THROWS_WITH(mlo::hypergrad::Sama(mlo::SamaOptions().alpha(0)), Catch::Contains("alpha"));
}

TEST_CASE("Sama: its record of the latest step saves and loads (resumable method state)",
          "[hypergrad][sama]") {
  // Adam: the preconditioner reads the gradient and the rate the latest step used; SGD with
  // momentum: whether that step created the buffer.
  const bool adam = GENERATE(false, true);
  CAPTURE(adam);
  Quadratic q = make_quadratic();
  if (adam) {
    q.lower->optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.05).eps(1e-3));
  } else {
    // (dampening 0.25: the step that creates the buffer has factor 1, later ones 0.75)
    q.lower->optimizer<torch::optim::SGD>(
        torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.25));
  }
  mlo::hypergrad::Sama sama(mlo::SamaOptions{});
  with_peers(q);
  run_unroll(*q.lower_level, &sama, adam ? 3 : 1);
  const auto expected = sama.precondition({q.v}, *q.lower_level);

  torch::serialize::OutputArchive out;
  sama.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  mlo::hypergrad::Sama loaded(mlo::SamaOptions{});
  loaded.load(in);
  CHECK(torch::equal(loaded.precondition({q.v}, *q.lower_level)[0], expected[0]));
  // Without the record a fresh method preconditions differently (or refuses): the state matters.
  mlo::hypergrad::Sama fresh(mlo::SamaOptions{});
  bool differs = true;
  try {
    differs = !torch::equal(fresh.precondition({q.v}, *q.lower_level)[0], expected[0]);
  } catch (const mlo::Error&) {
  }
  CHECK(differs);
}

}  // namespace sama_test
