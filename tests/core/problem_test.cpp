// Problem: the user's optimizer and schedule are used as given, hooks fire in order, state
// round-trips, gradient clipping bounds the step.
#include "support/in_memory_state.h"
#include "support/levels.h"
#include "support/toy.h"

#include <catch2/catch.hpp>

namespace problem_test {

using Catch::Matchers::Contains;
using mlo::ProblemConfig;
using mlo_test::Toy;
using mlo_test::Trace;

namespace {

// A single-problem engine (plain training) around `problem`.
void run_alone(const std::shared_ptr<mlo::Problem>& problem, int64_t steps) {
  mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
  engine.add(problem);
  engine.run();
}

}  // namespace

TEST_CASE("Problem: the user's optimizer keeps its param groups and state", "[core][problem]") {
  auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
  auto module = p->module_as<mlo_test::ScalarImpl>();
  auto sgd = std::make_shared<torch::optim::SGD>(
      std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(
          {module->w}, std::make_unique<torch::optim::SGDOptions>(
                           torch::optim::SGDOptions(0.05).momentum(0.9)))},
      torch::optim::SGDOptions(1.0));
  p->optimizer(sgd);
  run_alone(p, 3);
  REQUIRE(&p->optimizer() == sgd.get());
  REQUIRE(sgd->param_groups().size() == 1);
  CHECK(sgd->param_groups()[0].options().get_lr() == Approx(0.05));
  // Momentum buffers survived all three steps (never rebuilt).
  CHECK(sgd->state().size() == 1);
  // Hand-computed heavy-ball SGD on (w - 1)^2 from 0.5 with lr 0.05, momentum 0.9.
  double w = 0.5, buf = 0.0;
  for (int i = 0; i < 3; ++i) {
    const double g = 2.0 * (w - 1.0);
    buf = i == 0 ? g : 0.9 * buf + g;
    w -= 0.05 * buf;
  }
  CHECK(p->value() == Approx(w).epsilon(1e-12));
}

TEST_CASE("Problem: the schedule advances once per optimizer step", "[core][problem]") {
  auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
  p->scheduler([](int64_t steps) { return std::pow(0.5, static_cast<double>(steps)); });
  run_alone(p, 3);
  CHECK(p->optimizer_steps() == 3);
  CHECK(p->optimizer().param_groups()[0].options().get_lr() == Approx(0.1 * 0.125));
}

TEST_CASE("Problem: hooks are called, and a custom optimizer step replaces the optimizer",
          "[core][problem]") {
  struct Hooked : Toy {
    using Toy::Toy;
    int starts = 0, grads = 0, params = 0;
    void on_inner_loop_start() override { ++starts; }
    void grad_callback(std::vector<torch::Tensor>& g) override {
      ++grads;
      g[0] = torch::zeros_like(g[0]);  // a callback may replace gradients
    }
    void param_callback() override { ++params; }
  };
  auto p = std::make_shared<Hooked>("p", ProblemConfig().unroll_steps(2), nullptr);
  const double before = p->value();
  run_alone(p, 4);
  CHECK(p->starts == 2);  // one inner loop per unroll of 2 steps
  CHECK(p->grads == 4);
  CHECK(p->params == 4);
  CHECK(p->value() == before);  // zeroed gradients: SGD did not move

  struct Custom : Toy {
    using Toy::Toy;
    bool custom_optimizer_step() override {
      torch::NoGradGuard no_grad;
      w().add_(1.0);
      return true;
    }
  };
  auto c = std::make_shared<Custom>("c", ProblemConfig(), nullptr);
  run_alone(c, 2);
  CHECK(c->value() == Approx(2.5));
}

TEST_CASE("Problem: gradient clipping bounds the update", "[core][problem]") {
  auto p = std::make_shared<Toy>("p", ProblemConfig().gradient_clipping(0.01), nullptr, 0.5, 1.0);
  run_alone(p, 1);
  // Unclipped: w = 0.5 - 1.0 * 2 * (0.5 - 1) = 1.5. Clipped to norm 0.01: 0.5 + 0.01.
  CHECK(p->value() == Approx(0.51).epsilon(1e-6));
}

TEST_CASE("Problem: state_dict round-trips module, optimizer and counters", "[core][problem]") {
  auto a = mlo_test::toy("a", ProblemConfig(), nullptr);
  a->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
  run_alone(a, 3);
  const std::string saved = mlo_test::saved_state(*a);
  auto b = mlo_test::toy("a", ProblemConfig(), nullptr);
  b->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
  mlo_test::load_state(*b, saved);
  CHECK(b->value() == a->value());
  CHECK(b->step_count() == 3);
  CHECK(b->optimizer_steps() == 3);
  // Same momentum buffer: one more step from each lands at the same place.
  run_alone(a, 1);
  run_alone(b, 1);
  CHECK(b->value() == a->value());
}

TEST_CASE("Problem: a non-scalar loss is refused with the problem's name", "[core][problem]") {
  struct Bad : Toy {
    using Toy::Toy;
    torch::Tensor training_step(const mlo::Batch&) override { return w().repeat({3}); }
  };
  auto p = std::make_shared<Bad>("bad", ProblemConfig(), nullptr);
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p);
  REQUIRE_THROWS_WITH(engine.run(),
                      Contains("problem 'bad': training_step must return a scalar loss"));
}

namespace {

// A toy lower problem that records why each training_step call runs, and at which w.
struct Recording : Toy {
  using Toy::Toy;
  struct Call {
    mlo::LossCall call;
    double w;
  };
  torch::Tensor training_step(const mlo::Batch& batch) override {
    calls.push_back({loss_call(), value()});
    log_metric("w", value());
    log_metric("calls", static_cast<double>(calls.size()));
    return Toy::training_step(batch);
  }
  void param_callback() override { during_step = loss_call(); }
  std::vector<Call> calls;
  mlo::LossCall during_step = mlo::LossCall::kEvaluation;
};

// One unroll of `lower` (w0 = 0.5, lr 0.1) under `upper` (u = 0.5): the lower loss is
// (w - 1)^2 + w u, so each own step moves w by -0.1 (2 (w - 1) + u); returns the lower's calls.
std::shared_ptr<Recording> run_pair(const ProblemConfig& config, int64_t steps) {
  auto upper = mlo_test::toy("upper", ProblemConfig(), nullptr);
  auto lower = std::make_shared<Recording>("lower", config, nullptr);
  mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
  engine.add(upper).add(lower);
  mlo_test::link(engine, upper, lower);
  engine.run();
  REQUIRE(upper->optimizer_steps() == 1);
  return lower;
}

}  // namespace

TEST_CASE("Problem: training_step knows its own step from a hypergradient's re-evaluation",
          "[core][problem]") {
  using mlo::LossCall;
  // Own step at w0 = 0.5: loss (0.5 - 1)^2 + 0.5 * 0.5 = 0.5, gradient 2 (0.5 - 1) + 0.5 = -0.5,
  // so w1 = 0.55. The upper's v = dL_upper/dw = u = 0.5.
  SECTION("DARTS: one own step, then two re-evaluations at w1 +- alpha v / |v|") {
    const auto lower =
        run_pair(ProblemConfig().method(mlo::DartsOptions().alpha(0.01)), /*steps=*/1);
    REQUIRE(lower->calls.size() == 3);
    CHECK(lower->calls[0].call == LossCall::kOwnStep);
    CHECK(lower->calls[0].w == Approx(0.5).epsilon(1e-15));
    CHECK(lower->calls[1].call == LossCall::kReevaluation);
    CHECK(lower->calls[2].call == LossCall::kReevaluation);
    // eps v = 0.01 v / |v| = +-0.01 (the order of the two sides is the method's).
    const double a = lower->calls[1].w, b = lower->calls[2].w;
    CHECK(std::min(a, b) == Approx(0.54).epsilon(1e-12));
    CHECK(std::max(a, b) == Approx(0.56).epsilon(1e-12));
    // The step's metrics, not the last re-evaluation's.
    CHECK(lower->metrics().at("w") == Approx(0.5).epsilon(1e-15));
    CHECK(lower->metrics().at("calls") == 1.0);
    CHECK(lower->metrics().at("loss") == Approx(0.5).epsilon(1e-15));
    CHECK(lower->during_step == LossCall::kOwnStep);     // the hooks run inside the own step
    CHECK(lower->loss_call() == LossCall::kEvaluation);  // and it is over
  }
  SECTION("Neumann over a window of two micro-batches: two own steps, two re-evaluations") {
    // Both micro-steps at w0 (the optimizer steps after the second); the hypergradient
    // re-evaluates each micro-batch of the window once, at w1 = 0.5 - 0.1 * (-0.5) = 0.55.
    // (alpha 0.5: at alpha 1 the series sum_k (1 - 2 alpha)^k over k = 0..3 is exactly 0, and a
    // zero first hypergradient adds the engine's one evaluation of the link's direction)
    const auto lower = run_pair(
        ProblemConfig().gradient_accumulation(2).method(
            mlo::NeumannOptions().iterations(3).alpha(0.5)),
        /*steps=*/2);
    REQUIRE(lower->calls.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
      INFO("call " << i);
      CHECK(lower->calls[i].call == (i < 2 ? LossCall::kOwnStep : LossCall::kReevaluation));
      CHECK(lower->calls[i].w == Approx(i < 2 ? 0.5 : 0.55).epsilon(1e-12));
    }
    CHECK(lower->metrics().at("w") == Approx(0.5).epsilon(1e-15));
    CHECK(lower->metrics().at("calls") == 2.0);
  }
  SECTION("Unrolled: the replay's evaluations are re-evaluations") {
    // Two own steps (at w0 = 0.5 and w1 = 0.55), then the replay of the unroll: the advance
    // x0 -> x1, the one-time check that x1 -> x2 lands on the weights, and the reverse pass
    // (step 2 at x1, step 1 at x0).
    const auto lower = run_pair(ProblemConfig().unroll_steps(2).method(mlo::UnrolledOptions()),
                                /*steps=*/2);
    const std::vector<double> at = {0.5, 0.55, 0.5, 0.55, 0.55, 0.5};
    REQUIRE(lower->calls.size() == at.size());
    for (size_t i = 0; i < at.size(); ++i) {
      INFO("call " << i << " at w " << lower->calls[i].w);
      CHECK(lower->calls[i].call == (i < 2 ? LossCall::kOwnStep : LossCall::kReevaluation));
      CHECK(lower->calls[i].w == Approx(at[i]).epsilon(1e-12));
    }
    CHECK(lower->metrics().at("w") == Approx(0.55).epsilon(1e-12));  // the second own step's
    CHECK(lower->metrics().at("calls") == 2.0);
  }
  SECTION("A direct call is an evaluation; Level::loss is a re-evaluation and records nothing") {
    auto p = std::make_shared<Recording>("p", ProblemConfig(), nullptr);
    run_alone(p, 1);  // w: 0.5 -> 0.5 - 0.1 * 2 (0.5 - 1) = 0.6
    mlo::testing::make_level(*p)->loss();
    CHECK(p->calls.back().call == LossCall::kReevaluation);
    CHECK(p->metrics().at("calls") == 1.0);
    p->training_step(mlo::Batch());
    CHECK(p->calls.back().call == LossCall::kEvaluation);
    CHECK(p->calls.back().w == Approx(0.6).epsilon(1e-12));
    CHECK(p->metrics().at("calls") == 3.0);  // an evaluation records, as user code asks
  }
}

}  // namespace problem_test
