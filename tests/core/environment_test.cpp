// mlo::Environment (core/environment.h): the engine steps it once per global step, before any
// problem, so a lower and an upper problem read the same task; it is saved and restored with the
// engine's state, so a resumed run sees the tasks the uninterrupted run saw.
#include "support/in_memory_state.h"
#include "support/toy.h"

#include <mlo/core/environment.h>

#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace environment_test {

using Catch::Matchers::Contains;

namespace {

// A new random "task" (one number, seeded) every `period` global steps; its support batch is
// the task, its query batch the task plus 100. It records the global steps it was stepped at.
struct Tasks : mlo::Environment {
  explicit Tasks(int64_t period) : period(period) { generator.set_current_seed(7); }
  void step(int64_t global_step) override {
    steps.push_back(global_step);
    if ((global_step - 1) % period == 0) {
      task = at::randn({1}, generator, torch::kDouble);
      ++tasks_drawn;
    }
  }
  mlo::Batch batch(const std::string& role) override {
    if (role == "support") return mlo::Batch(task.clone());
    if (role == "query") return mlo::Batch(task + 100.0);
    throw mlo::Error("unknown role '" + role + "' (roles: support, query)");
  }
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("generator", generator.get_state());
    archive.write("task", task);
  }
  void load(torch::serialize::InputArchive& archive) override {
    at::Tensor state;
    archive.read("generator", state);
    generator.set_state(state);
    archive.read("task", task);
  }
  int64_t period;
  at::Generator generator = at::detail::createCPUGenerator();
  at::Tensor task = at::zeros({1}, torch::kDouble);
  std::vector<int64_t> steps;
  int64_t tasks_drawn = 0;
};

// A Toy that records the batch value of each of its own steps.
struct Reader : mlo_test::Toy {
  using mlo_test::Toy::Toy;
  torch::Tensor training_step(const mlo::Batch& batch) override {
    if (loss_call() == mlo::LossCall::kOwnStep && batch.data.defined()) {
      seen.push_back(batch.data.item<double>());
    }
    return mlo_test::Toy::training_step(batch);
  }
  std::vector<double> seen;
};

struct Pair {
  std::shared_ptr<Tasks> tasks;
  std::shared_ptr<Reader> inner, outer;
};

// inner (unroll 3, reads support) under outer (reads query), one task per unroll.
Pair build(mlo::Engine& engine) {
  Pair pair;
  pair.tasks = std::make_shared<Tasks>(3);
  pair.outer = std::make_shared<Reader>("outer", mlo::ProblemConfig(), nullptr, 0.3, 0.1);
  pair.inner = std::make_shared<Reader>(
      "inner", mlo::ProblemConfig().unroll_steps(3).method(mlo::CGOptions().iterations(2)),
      nullptr, -0.2, 0.1);
  pair.inner->data(pair.tasks->stream("support"));
  pair.outer->data(pair.tasks->stream("query"));
  engine.add(pair.outer).add(pair.inner).environment(pair.tasks);
  mlo_test::link(engine, pair.outer, pair.inner);
  return pair;
}

}  // namespace

TEST_CASE("Environment: stepped once per global step before the problems; both levels read "
          "the same task",
          "[core][environment]") {
  mlo::Engine engine(mlo::EngineConfig().train_iters(9));
  const Pair pair = build(engine);
  engine.run();
  CHECK(pair.tasks->steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(pair.tasks->tasks_drawn == 3);
  REQUIRE(pair.inner->seen.size() == 9);
  REQUIRE(pair.outer->seen.size() == 3);
  for (size_t task = 0; task < 3; ++task) {
    INFO("task " << task);
    const double support = pair.inner->seen[3 * task];
    // the whole unroll on one task, and the outer step after it on that task's query set
    CHECK(pair.inner->seen[3 * task + 1] == support);
    CHECK(pair.inner->seen[3 * task + 2] == support);
    CHECK(pair.outer->seen[task] == support + 100.0);
    if (task > 0) CHECK(support != pair.inner->seen[3 * task - 1]);
  }
}

TEST_CASE("Environment: saved with the engine, a resumed run reads the same tasks and ends "
          "bit for bit where the uninterrupted one does",
          "[core][environment][resume]") {
  const int64_t total = 12;
  mlo::Engine straight_engine(mlo::EngineConfig().train_iters(total));
  const Pair straight = build(straight_engine);
  straight_engine.run();

  const int64_t stop = GENERATE(2, 3, 7);  // inside an unroll, at its end, inside the next
  CAPTURE(stop);
  std::string saved;
  {
    mlo::Engine engine(mlo::EngineConfig().train_iters(stop));
    build(engine);
    engine.run();
    saved = mlo_test::saved_state(engine);
  }
  mlo::Engine engine(mlo::EngineConfig().train_iters(total));
  const Pair resumed = build(engine);
  mlo_test::load_state(engine, saved);
  engine.run();
  // The steps after the resume: the same tasks, the same parameters.
  const std::vector<double> tail(straight.inner->seen.begin() + stop, straight.inner->seen.end());
  CHECK(resumed.inner->seen == tail);
  CHECK(resumed.outer->seen.back() == straight.outer->seen.back());
  CHECK(resumed.inner->value() == straight.inner->value());
  CHECK(resumed.outer->value() == straight.outer->value());
}

TEST_CASE("Environment: misuse is an error that says what to do", "[core][environment]") {
  SECTION("a stream from an environment that no shared_ptr owns") {
    Tasks on_stack(3);
    CHECK_THROWS_WITH(on_stack.stream("support"), Contains("std::shared_ptr"));
  }
  SECTION("an environment that hands out no batches") {
    struct Silent : mlo::Environment {
      void step(int64_t) override {}
    };
    auto silent = std::make_shared<Silent>();
    CHECK_THROWS_WITH(silent->stream("support")->next(),
                      Contains("role 'support'") && Contains("override Environment::batch"));
  }
  SECTION("a second environment, a null one, or one set after the start") {
    mlo::Engine engine(mlo::EngineConfig().train_iters(1));
    build(engine);
    CHECK_THROWS_WITH(engine.environment(std::make_shared<Tasks>(3)),
                      Contains("has an environment already"));
    CHECK_THROWS_WITH(engine.environment(nullptr), Contains("null"));
    engine.initialize();
    CHECK_THROWS_WITH(engine.environment(std::make_shared<Tasks>(3)),
                      Contains("before the engine starts"));
  }
  SECTION("a state saved without the environment") {
    std::string saved;
    {
      mlo::Engine engine(mlo::EngineConfig().train_iters(1));
      auto outer = std::make_shared<Reader>("outer", mlo::ProblemConfig(), nullptr, 0.3, 0.1);
      auto inner = std::make_shared<Reader>("inner", mlo::ProblemConfig(), nullptr, -0.2, 0.1);
      engine.add(outer).add(inner);
      mlo_test::link(engine, outer, inner);
      engine.run();
      saved = mlo_test::saved_state(engine);
    }
    mlo::Engine engine(mlo::EngineConfig().train_iters(2));
    build(engine);
    CHECK_THROWS_WITH(mlo_test::load_state(engine, saved),
                      Contains("no state for the environment"));
  }
}

}  // namespace environment_test
