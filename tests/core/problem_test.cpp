// Problem: the user's optimizer and schedule are used as given, hooks fire in order, state
// round-trips, gradient clipping bounds the step.
#include "support/toy.h"

#include <catch2/catch.hpp>

#include <sstream>

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
  std::stringstream stream;
  {
    torch::serialize::OutputArchive archive;
    a->state_dict(archive);
    archive.save_to(stream);
  }
  auto b = mlo_test::toy("a", ProblemConfig(), nullptr);
  b->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::serialize::InputArchive archive;
  archive.load_from(stream);
  b->load_state_dict(archive);
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
