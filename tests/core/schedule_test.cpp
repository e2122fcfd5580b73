// Scheduling semantics of the engine (unroll, warmup, multi-level chains, several children,
// roll-back), checked on traces of optimizer steps.
#include "support/toy.h"

#include <catch2/catch.hpp>

namespace schedule_test {

using mlo::ProblemConfig;
using mlo_test::Toy;
using mlo_test::Trace;

namespace {

// For every step of `stepper`, how many steps `watched` had taken before it.
std::vector<int64_t> watched_counts(const Trace& trace, const std::string& watched,
                                    const std::string& stepper) {
  std::vector<int64_t> out;
  int64_t seen = 0;
  for (const auto& [who, step] : trace) {
    if (who == watched) ++seen;
    if (who == stepper) out.push_back(seen);
  }
  return out;
}

}  // namespace

TEST_CASE("Schedule: with unroll_steps=10 the outer steps once after the 10th inner step",
          "[core][schedule]") {
  auto trace = std::make_shared<Trace>();
  auto outer = mlo_test::toy("outer", ProblemConfig(), trace);
  auto inner = mlo_test::toy("inner", ProblemConfig().unroll_steps(10), trace);
  mlo::Engine engine(mlo::EngineConfig().train_iters(20));
  engine.add(outer).add(inner);
  mlo_test::link(engine, outer, inner);
  engine.initialize();
  for (int64_t i = 1; i <= 20; ++i) {
    engine.step();
    INFO("after inner step " << i);
    REQUIRE(inner->step_count() == i);
    REQUIRE(outer->step_count() == i / 10);
  }
}

TEST_CASE("Schedule: warmup steps hold the parent back", "[core][schedule]") {
  auto trace = std::make_shared<Trace>();
  auto outer = mlo_test::toy("outer", ProblemConfig(), trace);
  auto inner = mlo_test::toy("inner", ProblemConfig().unroll_steps(2).warmup_steps(3), trace);
  mlo::Engine engine;
  engine.add(outer).add(inner);
  mlo_test::link(engine, outer, inner);
  engine.initialize();
  // The parent steps when count % 2 == 0 and count > 3: at inner steps 4, 6, 8.
  const std::vector<int64_t> expected = {0, 0, 0, 1, 1, 2, 2, 3};
  for (size_t i = 0; i < expected.size(); ++i) {
    engine.step();
    INFO("after inner step " << i + 1);
    REQUIRE(outer->step_count() == expected[i]);
  }
}

TEST_CASE("Schedule: a 3-level chain low(U=2) -> mid(U=2) -> top", "[core][schedule]") {
  auto trace = std::make_shared<Trace>();
  auto top = mlo_test::toy("top", ProblemConfig(), trace);
  auto mid = mlo_test::toy("mid", ProblemConfig().unroll_steps(2), trace);
  auto low = mlo_test::toy("low", ProblemConfig().unroll_steps(2), trace);
  mlo::Engine engine(mlo::EngineConfig().train_iters(8));
  engine.add(top).add(mid).add(low);
  mlo_test::link(engine, top, mid);
  mlo_test::link(engine, mid, low);
  engine.run();
  CHECK(watched_counts(*trace, "low", "mid") == std::vector<int64_t>{2, 4, 6, 8});
  CHECK(watched_counts(*trace, "low", "top") == std::vector<int64_t>{4, 8});
  CHECK(low->step_count() == 8);
  CHECK(mid->step_count() == 4);
  CHECK(top->step_count() == 2);
  REQUIRE(engine.graph().leaves().size() == 1);
  CHECK(engine.graph().leaves()[0] == low.get());
}

TEST_CASE("Schedule: a parent with two children steps only when both are ready",
          "[core][schedule]") {
  auto trace = std::make_shared<Trace>();
  auto parent = mlo_test::toy("parent", ProblemConfig(), trace);
  auto a = mlo_test::toy("a", ProblemConfig().unroll_steps(2), trace);
  auto b = mlo_test::toy("b", ProblemConfig().unroll_steps(3), trace);
  mlo::Engine engine;
  engine.add(parent).add(a).add(b);
  mlo_test::link(engine, parent, a);
  mlo_test::link(engine, parent, b);
  engine.initialize();
  // a is ready after its steps 2, 4, 6; b after 3, 6. A ready flag stays set until the parent
  // steps, so the parent steps at global steps 3 (a@2 + b@3) and 6 (a@6 + b@6).
  const std::vector<int64_t> expected = {0, 0, 1, 1, 1, 2};
  for (size_t i = 0; i < expected.size(); ++i) {
    engine.step();
    INFO("after global step " << i + 1);
    REQUIRE(parent->step_count() == expected[i]);
  }
}

TEST_CASE("Schedule: roll_back restores the pre-unroll state and redoes one step",
          "[core][schedule]") {
  auto trace = std::make_shared<Trace>();
  auto outer = mlo_test::toy("outer", ProblemConfig(), trace);
  auto inner = mlo_test::toy("inner", ProblemConfig().unroll_steps(3).roll_back(true), trace);
  // Different batches each step, so the redone step is visibly the last batch's.
  int64_t calls = 0;
  inner->data([&calls] {
    ++calls;
    return mlo::Batch(torch::full({1}, 0.1 * static_cast<double>(calls), torch::kDouble));
  });
  mlo::Engine engine;
  engine.add(outer).add(inner);
  mlo_test::link(engine, outer, inner);
  engine.initialize();

  const double w0 = inner->value();
  engine.step();
  engine.step();
  REQUIRE(inner->value() != w0);
  engine.step();  // third inner step -> outer steps -> inner rolls back and redoes one step
  REQUIRE(outer->step_count() == 1);

  // Expected: one SGD step from w0 on the third batch with the updated outer parameter:
  // dL/dw = 2 (w - target) + batch + outer.w
  const double batch = 0.3;
  const double expected = w0 - 0.1 * (2.0 * (w0 - 1.0) + batch + outer->value());
  CHECK(inner->value() == Approx(expected).epsilon(1e-12));
  CHECK(inner->step_count() == 3);
  CHECK(calls == 3);  // the redone step re-uses the batch, it does not fetch a new one
}

TEST_CASE("Schedule: roll_back after warmup rewinds only the last unroll, not the warmup",
          "[core][schedule]") {
  // U=3, W=5: the parent first steps at inner step 6; roll-back must restore the state taken at
  // the start of that unroll (after step 3), not the one from before step 1.
  auto make = [](std::shared_ptr<Trace> trace) {
    auto outer = mlo_test::toy("outer", ProblemConfig(), trace);
    auto inner =
        mlo_test::toy("inner", ProblemConfig().unroll_steps(3).warmup_steps(5).roll_back(true),
                      trace);
    return std::make_pair(outer, inner);
  };
  // The inner value after 3 warmup steps (the parent never moves before step 6).
  auto [outer3, inner3] = make(nullptr);
  {
    mlo::Engine engine(mlo::EngineConfig().train_iters(3));
    engine.add(outer3).add(inner3);
    mlo_test::link(engine, outer3, inner3);
    engine.run();
  }
  auto [outer, inner] = make(nullptr);
  mlo::Engine engine(mlo::EngineConfig().train_iters(6));
  engine.add(outer).add(inner);
  mlo_test::link(engine, outer, inner);
  engine.run();
  REQUIRE(outer->step_count() == 1);
  // Redo of one SGD step (lr 0.1) from w3 with the updated outer value:
  // d/dw [(w - 1)^2 + w * outer] = 2 (w - 1) + outer.
  const double w3 = inner3->value();
  const double expected = w3 - 0.1 * (2 * (w3 - 1) + outer->value());
  INFO("inner after the redo " << inner->value() << ", expected " << expected << " (w3 = " << w3
                               << ")");
  CHECK(inner->value() == Approx(expected).epsilon(1e-12));
}

TEST_CASE("Schedule: roll_back on the first unroll redoes the step with a fresh optimizer state",
          "[core][schedule]") {
  // The snapshot of the first unroll is taken before any optimizer step: it holds no momentum
  // buffer, Adam moment or step count. The redo must start from that empty state, not from the
  // state the discarded steps built (LibTorch's Optimizer::load keeps entries an archive lacks).
  struct Case {
    const char* name;
    std::function<void(Toy&)> optimizer;
    // w after one step from w0 with gradient g, from a fresh state (lr 0.1).
    std::function<double(double w0, double g)> one_step;
  };
  const std::vector<Case> cases{
      {"sgd momentum 0.9",
       [](Toy& p) {
         p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
       },
       // The first step sets the buffer to g: w0 - lr g.
       [](double w0, double g) { return w0 - 0.1 * g; }},
      {"adam",
       [](Toy& p) { p.optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.1)); },
       // Step 1, bias-corrected: m = g, v = g^2, so w0 - lr g / (|g| + eps).
       [](double w0, double g) { return w0 - 0.1 * g / (std::abs(g) + 1e-8); }},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      auto outer = mlo_test::toy("outer", ProblemConfig(), nullptr);
      auto inner = mlo_test::toy("inner", ProblemConfig().unroll_steps(3).roll_back(true), nullptr);
      c.optimizer(*inner);
      int64_t calls = 0;
      inner->data([&calls] {
        ++calls;
        return mlo::Batch(torch::full({1}, 0.1 * static_cast<double>(calls), torch::kDouble));
      });
      mlo::Engine engine;
      engine.add(outer).add(inner);
      mlo_test::link(engine, outer, inner);
      engine.initialize();
      const double w0 = inner->value();
      for (int i = 0; i < 3; ++i) engine.step();  // the third inner step: outer steps, redo
      REQUIRE(outer->step_count() == 1);
      // dL/dw = 2 (w - 1) + batch + outer.w, at w0 on the third batch.
      const double g = 2.0 * (w0 - 1.0) + 0.3 + outer->value();
      const double expected = c.one_step(w0, g);
      INFO("inner after the redo " << inner->value() << ", expected " << expected);
      CHECK(inner->value() == Approx(expected).epsilon(1e-12));
    }
  }
}

TEST_CASE("Schedule: the counts a run takes are the engine's, for every level of a graph",
          "[core][schedule]") {
  // A parent over two children with different periods, accumulation, warmup and roll-back, and a
  // grandparent: the engine steps through mlo::Schedule, and count_optimizer_steps (what a
  // cosine schedule over a run reads) runs the same rule on counts.
  auto trace = std::make_shared<Trace>();
  auto low_a = mlo_test::toy("low_a", ProblemConfig().unroll_steps(2).gradient_accumulation(3)
                                          .warmup_steps(4), trace);
  auto low_b = mlo_test::toy("low_b", ProblemConfig().unroll_steps(3).roll_back(true), trace);
  auto mid = mlo_test::toy("mid", ProblemConfig().unroll_steps(2), trace);
  auto top = mlo_test::toy("top", ProblemConfig(), trace);
  mlo::Engine engine(mlo::EngineConfig().train_iters(37).valid_step(0).log_step(0));
  engine.add(top).add(mid).add(low_a).add(low_b);
  mlo_test::link(engine, top, mid);
  mlo_test::link(engine, mid, low_a);
  mlo_test::link(engine, mid, low_b);
  engine.run();
  const std::vector<mlo::Schedule::Level> levels = {
      mlo::Schedule::Level::of(top->config()), mlo::Schedule::Level::of(mid->config()),
      mlo::Schedule::Level::of(low_a->config()), mlo::Schedule::Level::of(low_b->config())};
  // (by index: mid is above low_a and low_b, top above mid)
  const auto counts = mlo::count_optimizer_steps(levels, {{}, {0}, {1}, {1}}, 37);
  CHECK(counts[0] == top->optimizer_steps());
  CHECK(counts[1] == mid->optimizer_steps());
  CHECK(counts[2] == low_a->optimizer_steps());
  CHECK(counts[3] == low_b->optimizer_steps());
  CHECK(counts[0] > 0);  // (the graph does step every level)
}

}  // namespace schedule_test
