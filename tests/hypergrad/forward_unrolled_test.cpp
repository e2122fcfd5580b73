// Tests of mlo::hypergrad::ForwardUnrolled (method: forward): its hypergradient equals
// unrolled's on the HPO problem for K = 1, 10, 100 with SGD momentum, Adam and AdamW (double
// precision, 1e-10), also over accumulation windows; the closed form on a quadratic with the
// tangents carried over unrolls of one step; carried tangents restarting with the weights; its
// saved tangents continue an unroll bit for bit; its refusals.
#include <mlo/core/engine.h>
#include <mlo/hypergrad.h>
#include <support/double_logreg.h>
#include <support/in_memory_state.h>
#include <support/inner_steps.h>
#include <support/method_options.h>
#include <support/quadratic.h>
#include <support/relative_error.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace forward_unrolled_test {

using mlo::testing::make_level;
using mlo::testing::run_unroll;
using mlo::testing::SavedState;
using Tensors = std::vector<torch::Tensor>;

namespace {

using SetOptimizer = std::function<void(mlo::Problem&)>;

const std::vector<std::pair<const char*, SetOptimizer>>& optimizers() {
  static const std::vector<std::pair<const char*, SetOptimizer>> all = {
      {"sgd momentum nesterov wd",
       [](mlo::Problem& p) {
         p.optimizer<torch::optim::SGD>(
             torch::optim::SGDOptions(0.2).momentum(0.8).nesterov(true).weight_decay(0.01));
       }},
      {"adam wd amsgrad",
       [](mlo::Problem& p) {
         p.optimizer<torch::optim::Adam>(
             torch::optim::AdamOptions(0.05).weight_decay(0.01).amsgrad(true));
       }},
      {"adamw",
       [](mlo::Problem& p) {
         p.optimizer<torch::optim::AdamW>(torch::optim::AdamWOptions(0.05).weight_decay(0.1));
       }},
  };
  return all;
}

Tensors random_like(const Tensors& params, uint64_t seed) {
  torch::manual_seed(seed);
  Tensors v;
  for (const auto& p : params) v.push_back(torch::randn_like(p));
  return v;
}

// The HPO pair as levels, the inner one's parent set as an engine sets it.
std::pair<std::shared_ptr<mlo::detail::LevelRuntime>, std::shared_ptr<mlo::detail::LevelRuntime>>
linked_levels(mlo::testing::DoubleLogReg& r) {
  auto inner = make_level(*r.pair.inner, {r.pair.inner.get(), r.pair.outer.get()});
  auto outer = make_level(*r.pair.outer);
  inner->set_parents({outer.get()});
  return {inner, outer};
}

// An unroll of `steps` steps that starts from the weights as they are (the HPO problem restarts
// them from zero at an engine's unroll start, where one step does not depend on lambda).
void unroll_from_here(mlo::detail::LevelRuntime& level, mlo::Hypergradient& method,
                      int64_t steps) {
  method.on_unroll_start(level);
  for (int64_t t = 0; t < steps; ++t) {
    mlo::detail::StepContext context;
    context.method = &method;
    level.step(context);
  }
}

}  // namespace

TEST_CASE("Forward: equals unrolled on the HPO problem for K = 1, 10, 100 (double, 1e-10)",
          "[hypergrad][forward]") {
  for (const auto& [name, set_optimizer] : optimizers()) {
    for (const int64_t steps : {1, 10, 100}) {
      INFO(name << ", K = " << steps);
      auto r = mlo::testing::make_double_logreg(mlo::ProblemConfig(), set_optimizer);
      auto& inner = *r.pair.inner;
      const auto [inner_level, outer_level] = linked_levels(r);
      // A non-trivial start: weights and optimizer state after a few steps.
      run_unroll(*inner_level, nullptr, 3);
      SavedState start(inner);
      const Tensors v = random_like(inner.parameters(), 7);

      mlo::hypergrad::Unrolled unrolled{mlo::UnrolledOptions()};
      unroll_from_here(*inner_level, unrolled, steps);
      const Tensors w_unrolled = mlo::hypergrad::clone(inner.parameters());
      const Tensors reference = unrolled.apply(v, *inner_level, *outer_level);

      start.restore();
      mlo::hypergrad::ForwardUnrolled forward{mlo::ForwardOptions()};
      unroll_from_here(*inner_level, forward, steps);
      // (the same inner run: the method only watches it)
      for (size_t i = 0; i < w_unrolled.size(); ++i) {
        REQUIRE(torch::equal(inner.parameters()[i], w_unrolled[i]));
      }
      const Tensors out = forward.apply(v, *inner_level, *outer_level);
      REQUIRE(out.size() == 1);
      REQUIRE(forward.steps() == steps);
      REQUIRE(forward.hyperparameters() == 5);
      const double error = mlo::testing::relative_error(out, reference);
      INFO("forward " << out[0] << "\nunrolled " << reference[0] << "\nrelative error " << error);
      CHECK(reference[0].norm().item<double>() > 1e-6);  // (a product that says something)
      CHECK(error < 1e-10);
    }
  }
}

TEST_CASE("Forward: carried over unrolls of one step, SGD on a quadratic gives the closed form",
          "[hypergrad][forward]") {
  // w_t = (I - lr A) w_{t-1} + lr B lambda: d w_K / d lambda ^T v = lr B^T sum_t (I - lr A)^t v.
  const int64_t steps = 12;
  const double lr = 0.3;
  for (const bool carry : {true, false}) {
    INFO("carry " << carry);
    // (a second upper tensor the loss ignores: its scalars come after lambda's, and get zeros)
    auto q = mlo::testing::Quadratic::make(mlo::ProblemConfig(), 0, 5, 3, 0.5, 2.0,
                                           /*unused_upper_parameter=*/true);
    q.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(lr));
    q.lower_level = make_level(*q.lower, {q.lower.get(), q.upper.get()});
    q.lower_level->set_parents({q.upper_level.get()});
    mlo::hypergrad::ForwardUnrolled forward{mlo::ForwardOptions().carry(carry)};
    for (int64_t t = 0; t < steps; ++t) run_unroll(*q.lower_level, &forward, 1);
    const Tensors out = forward.apply({q.v}, *q.lower_level, *q.upper_level);
    const int64_t horizon = carry ? steps : 1;
    CHECK(forward.steps() == horizon);
    CHECK(forward.hyperparameters() == 3 + 4);
    REQUIRE(out.size() == 2);
    CHECK(torch::equal(out[1], torch::zeros({2, 2}, torch::kDouble)));
    torch::Tensor sum = torch::zeros_like(q.v), term = q.v.clone();
    const torch::Tensor m = torch::eye(q.n, q.a.options()) - lr * q.a;
    for (int64_t t = 0; t < horizon; ++t) {
      sum += term;
      term = m.mv(term);
    }
    const torch::Tensor expected = lr * q.b.t().mv(sum);
    INFO("got " << out[0] << " expected " << expected);
    CHECK(mlo::testing::relative_error(out[0], expected) < 1e-12);
  }
}

TEST_CASE("Forward: over accumulation windows, and carried where the weights restart",
          "[hypergrad][forward]") {
  const auto sgd = [](mlo::Problem& p) {
    p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.2).momentum(0.8));
  };
  SECTION("a window of 3 micro-batches: equal to unrolled (1e-10)") {
    auto r = mlo::testing::make_double_logreg(mlo::ProblemConfig().gradient_accumulation(3), sgd);
    auto& inner = *r.pair.inner;
    const auto [inner_level, outer_level] = linked_levels(r);
    run_unroll(*inner_level, nullptr, 6);
    SavedState start(inner);
    const Tensors v = random_like(inner.parameters(), 3);
    mlo::hypergrad::Unrolled unrolled{mlo::UnrolledOptions()};
    unroll_from_here(*inner_level, unrolled, 3 * 8);  // 8 optimizer steps
    const Tensors reference = unrolled.apply(v, *inner_level, *outer_level);
    start.restore();
    mlo::hypergrad::ForwardUnrolled forward{mlo::ForwardOptions()};
    unroll_from_here(*inner_level, forward, 3 * 8);
    CHECK(forward.steps() == 8);
    const Tensors out = forward.apply(v, *inner_level, *outer_level);
    CHECK(reference[0].norm().item<double>() > 1e-6);
    CHECK(mlo::testing::relative_error(out, reference) < 1e-10);
  }
  SECTION("carry on the HPO problem, which restarts its weights: the tangents restart too") {
    auto r = mlo::testing::make_double_logreg(mlo::ProblemConfig(), sgd);
    auto& inner = *r.pair.inner;
    const auto [inner_level, outer_level] = linked_levels(r);
    const Tensors v = random_like(inner.parameters(), 4);
    mlo::hypergrad::ForwardUnrolled carried{mlo::ForwardOptions().carry(true)};
    mlo::hypergrad::ForwardUnrolled fresh{mlo::ForwardOptions()};
    SavedState start(inner);
    run_unroll(*inner_level, &carried, 10);
    run_unroll(*inner_level, &carried, 10);  // (the weights restart from zero here)
    const Tensors a = carried.apply(v, *inner_level, *outer_level);
    CHECK(carried.steps() == 10);
    start.restore();
    inner.optimizer().state().clear();
    run_unroll(*inner_level, &fresh, 10);
    run_unroll(*inner_level, &fresh, 10);
    const Tensors b = fresh.apply(v, *inner_level, *outer_level);
    CHECK(b[0].norm().item<double>() > 1e-6);
    CHECK(torch::equal(a[0], b[0]));

    // Saved at the unroll boundary and resumed: the resumed method restarts its tangents too.
    start.restore();
    inner.optimizer().state().clear();
    std::string saved;
    {
      mlo::hypergrad::ForwardUnrolled first{mlo::ForwardOptions().carry(true)};
      run_unroll(*inner_level, &first, 10);
      saved = mlo_test::archive_bytes([&](auto& archive) { first.save(archive); });
    }
    mlo::hypergrad::ForwardUnrolled resumed{mlo::ForwardOptions().carry(true)};
    mlo_test::from_archive_bytes(saved, [&](auto& archive) { resumed.load(archive); });
    run_unroll(*inner_level, &resumed, 10);
    CHECK(resumed.steps() == 10);
    CHECK(torch::equal(resumed.apply(v, *inner_level, *outer_level)[0], a[0]));
  }
}

TEST_CASE("Forward: saved tangents continue an unroll bit for bit", "[hypergrad][forward]") {
  // The method's state saved after `stop` of 20 steps and loaded into a new instance gives the
  // uninterrupted run's hypergradient exactly.
  for (const auto& [name, set_optimizer] : optimizers()) {
    INFO(name);
    auto r = mlo::testing::make_double_logreg(mlo::ProblemConfig(), set_optimizer);
    auto& inner = *r.pair.inner;
    const auto [inner_level, outer_level] = linked_levels(r);
    SavedState start(inner);
    const Tensors v = random_like(inner.parameters(), 5);
    mlo::hypergrad::ForwardUnrolled straight{mlo::ForwardOptions()};
    run_unroll(*inner_level, &straight, 20);
    const Tensors expected = straight.apply(v, *inner_level, *outer_level);
    for (const int64_t stop : {1, 13}) {
      INFO("saved after step " << stop);
      start.restore();
      inner.optimizer().state().clear();
      std::string saved;
      {
        mlo::hypergrad::ForwardUnrolled first{mlo::ForwardOptions()};
        run_unroll(*inner_level, &first, stop);
        saved = mlo_test::archive_bytes([&](auto& archive) { first.save(archive); });
      }
      mlo::hypergrad::ForwardUnrolled resumed{mlo::ForwardOptions()};
      mlo_test::from_archive_bytes(saved, [&](auto& archive) { resumed.load(archive); });
      for (int64_t t = stop; t < 20; ++t) {
        mlo::detail::StepContext context;  // (no unroll start: the unroll goes on)
        context.method = &resumed;
        inner_level->step(context);
      }
      const Tensors out = resumed.apply(v, *inner_level, *outer_level);
      CHECK(resumed.steps() == 20);
      CHECK(torch::equal(out[0], expected[0]));
    }
  }
}

TEST_CASE("Forward: refusals", "[hypergrad][forward]") {
  SECTION("more upper-level parameters than max_hyperparameters, at engine start") {
    auto r = mlo::testing::make_double_logreg(
        mlo::ProblemConfig().method(mlo::ForwardOptions().max_hyperparameters(4)),
        [](mlo::Problem& p) { p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1)); });
    mlo::Engine engine(mlo::EngineConfig().train_iters(2));
    engine.add(r.pair.outer).add(r.pair.inner).link(r.pair.outer, r.pair.inner);
    REQUIRE_THROWS_WITH(engine.run(),
                        Catch::Contains("problem 'inner': forward carries one tangent per") &&
                            Catch::Contains("'outer' has 5 parameters, above "
                                            "forward.max_hyperparameters (4); use unrolled"));
  }
  SECTION("an optimizer without a differentiable update, gradient clipping, carry with roll-back") {
    auto r = mlo::testing::make_double_logreg(
        mlo::ProblemConfig().method(mlo::ForwardOptions()),
        [](mlo::Problem& p) { p.optimizer<torch::optim::RMSprop>(torch::optim::RMSpropOptions()); });
    mlo::Engine engine(mlo::EngineConfig().train_iters(2));
    engine.add(r.pair.outer).add(r.pair.inner).link(r.pair.outer, r.pair.inner);
    REQUIRE_THROWS_WITH(engine.run(), Catch::Contains("forward cannot differentiate this "
                                                      "optimizer's update"));
    auto clipped = mlo::testing::make_double_logreg(
        mlo::ProblemConfig().gradient_clipping(1.0).method(mlo::ForwardOptions()),
        [](mlo::Problem& p) { p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1)); });
    mlo::Engine second(mlo::EngineConfig().train_iters(2));
    second.add(clipped.pair.outer).add(clipped.pair.inner).link(clipped.pair.outer,
                                                                clipped.pair.inner);
    REQUIRE_THROWS_WITH(second.run(), Catch::Contains("forward: gradient_clipping"));
    auto rolled = mlo::testing::make_double_logreg(
        mlo::ProblemConfig().roll_back(true).method(mlo::ForwardOptions().carry(true)),
        [](mlo::Problem& p) { p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1)); });
    mlo::Engine third(mlo::EngineConfig().train_iters(2));
    third.add(rolled.pair.outer).add(rolled.pair.inner).link(rolled.pair.outer,
                                                             rolled.pair.inner);
    REQUIRE_THROWS_WITH(third.run(), Catch::Contains("forward.carry cannot follow roll_back"));
  }
  SECTION("options") {
    CHECK_THROWS_WITH(mlo::hypergrad::ForwardUnrolled(mlo::ForwardOptions().max_hyperparameters(0)),
                      Catch::Contains("forward.max_hyperparameters"));
  }
}

TEST_CASE("Forward: in an engine, the outer step follows the forward hypergradient",
          "[hypergrad][forward]") {
  // Two engines, identical but for the method (unrolled, forward), end at the same lambda.
  auto final_lambda = [](const mlo::MethodOptions& method) {
    auto r = mlo::testing::make_double_logreg(
        mlo::ProblemConfig().unroll_steps(10).method(method),
        [](mlo::Problem& p) {
          p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.2).momentum(0.5));
        });
    mlo::Engine engine(mlo::EngineConfig().train_iters(40));
    engine.add(r.pair.outer).add(r.pair.inner).link(r.pair.outer, r.pair.inner);
    engine.run();
    return r.pair.outer->weights().detach().clone();
  };
  const torch::Tensor initial = torch::tensor({0.1, 0.5, 1.0, 0.2, 2.0}, torch::kDouble);
  const torch::Tensor reverse = final_lambda(mlo::UnrolledOptions());
  const torch::Tensor forward = final_lambda(mlo::ForwardOptions());
  INFO("unrolled " << reverse << "\nforward " << forward);
  CHECK((reverse - initial).norm().item<double>() > 1e-3);  // lambda moved
  CHECK(mlo::testing::relative_error(forward, reverse) < 1e-10);
}

}  // namespace forward_unrolled_test
