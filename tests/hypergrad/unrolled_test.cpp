// Tests of mlo::hypergrad::Unrolled: the closed form on a quadratic with SGD, a finite-difference
// check of the unrolled objective (double precision) for SGD with momentum, Adam and AdamW, and
// binomial checkpointing equal to keeping every state.
#include "support/double_logreg.h"

#include <mlo/core/engine.h>
#include <mlo/hypergrad.h>
#include <support/inner_steps.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <support/method_options.h>

#include <catch2/catch.hpp>

#include <functional>
#include <memory>

namespace unrolled_test {

using mlo::testing::make_level;
using mlo::testing::Quadratic;
using mlo::testing::run_unroll;
using mlo::testing::SavedState;
namespace hpo = mlo::problems::hpo;

TEST_CASE("Unrolled: SGD on a quadratic equals lr B^T sum_t (I - lr A)^t v",
          "[hypergrad][unrolled]") {
  const int64_t steps = GENERATE(1, 7, 40);
  const auto checkpointing =
      GENERATE(mlo::UnrollCheckpointing::kNone, mlo::UnrollCheckpointing::kBinomial);
  CAPTURE(steps, static_cast<int>(checkpointing));
  const double lr = 0.3;
  Quadratic q = Quadratic::make(
      mlo::ProblemConfig().method(mlo::UnrolledOptions().checkpointing(checkpointing)));
  q.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(lr));
  q.upper->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  mlo::hypergrad::Unrolled method(mlo::test::options_of<mlo::UnrolledOptions>(q.lower->config()));
  q.lower_level = make_level(*q.lower, {q.lower.get(), q.upper.get()});
  run_unroll(*q.lower_level, &method, steps);
  const torch::Tensor w_after = q.lower->w().detach().clone();
  REQUIRE(method.recorded_steps() == steps);

  const auto out = method.apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 1);
  // Closed form: w_t = (I - lr A) w_{t-1} + lr B lambda.
  torch::Tensor sum = torch::zeros_like(q.v);
  torch::Tensor term = q.v.clone();
  const torch::Tensor m = torch::eye(q.n, q.a.options()) - lr * q.a;
  for (int64_t t = 0; t < steps; ++t) {
    sum += term;
    term = m.mv(term);
  }
  const torch::Tensor expected = lr * q.b.t().mv(sum);
  INFO("got " << out[0] << " expected " << expected);
  CHECK(mlo::testing::relative_error(out[0], expected) < 1e-12);
  CHECK(torch::equal(q.lower->w().detach(), w_after));  // restored bit for bit
  CHECK(method.last_stats().steps == steps);
}

using LogReg = mlo::testing::DoubleLogReg;

LogReg make_logreg(mlo::ProblemConfig config,
                   const std::function<void(mlo::Problem&)>& set_optimizer) {
  return mlo::testing::make_double_logreg(std::move(config), set_optimizer);
}

TEST_CASE("Unrolled: equals a finite difference of the unrolled objective (double)",
          "[hypergrad][unrolled]") {
  const std::vector<std::pair<const char*, std::function<void(mlo::Problem&)>>> optimizers = {
      {"sgd momentum nesterov wd",
       [](mlo::Problem& p) {
         p.optimizer<torch::optim::SGD>(
             torch::optim::SGDOptions(0.2).momentum(0.8).nesterov(true).weight_decay(0.01));
       }},
      {"sgd momentum dampening",
       [](mlo::Problem& p) {
         p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.2).momentum(0.7).dampening(0.3));
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
  const int64_t steps = 15;
  // 4: a non-trivial optimizer state at the unroll's start (a few earlier steps); 0: an empty
  // one (the first step creates SGD's momentum buffer; Adam starts at step 0).
  for (const int64_t warmup : {4, 0})
    for (const auto& [name, set_optimizer] : optimizers) {
      INFO(name << ", " << warmup << " steps before the unroll");
      LogReg r = make_logreg(mlo::ProblemConfig().method(mlo::UnrolledOptions()), set_optimizer);
      auto& inner = *r.pair.inner;
      auto& outer = *r.pair.outer;
      const auto inner_level = make_level(inner, {&inner, &outer});
      const auto outer_level = make_level(outer);
      if (warmup > 0) run_unroll(*inner_level, nullptr, warmup);
      REQUIRE(inner.optimizer().state().empty() == (warmup == 0));
      SavedState start(inner);
      torch::manual_seed(7);
      std::vector<torch::Tensor> v;
      for (const auto& p : inner.parameters()) v.push_back(torch::randn_like(p));

      mlo::hypergrad::Unrolled method(mlo::test::options_of<mlo::UnrolledOptions>(inner.config()));
      run_unroll(*inner_level, &method, steps);
      const auto out = method.apply(v, *inner_level, *outer_level);
      REQUIRE(out.size() == 1);

      // f(lambda) = v . w_K(lambda), by running the real optimizer from the same start.
      const torch::Tensor lambda0 = outer.weights().detach().clone();
      auto objective = [&](const torch::Tensor& lambda) {
        start.restore();
        if (warmup == 0) inner.optimizer().state().clear();  // loading keeps stale entries
        {
          torch::NoGradGuard no_grad;
          outer.weights().copy_(lambda);
        }
        run_unroll(*inner_level, nullptr, steps);
        double f = 0;
        const auto params = inner.parameters();
        for (size_t i = 0; i < params.size(); ++i) f += (params[i] * v[i]).sum().item<double>();
        return f;
      };
      const double h = 1e-5;
      for (int64_t j = 0; j < lambda0.numel(); ++j) {
        torch::Tensor plus = lambda0.clone(), minus = lambda0.clone();
        plus[j] += h;
        minus[j] -= h;
        const double fd = (objective(plus) - objective(minus)) / (2 * h);
        INFO("lambda index " << j << ": unrolled " << out[0][j].item<double>() << ", finite "
                             << "difference " << fd);
        CHECK(out[0][j].item<double>() == Approx(fd).epsilon(1e-6).margin(1e-9));
      }
    }
}

TEST_CASE("Unrolled: binomial checkpointing equals keeping every state (1e-10)",
          "[hypergrad][unrolled]") {
  const int64_t steps = 60;
  LogReg r = make_logreg(mlo::ProblemConfig(), [](mlo::Problem& p) {
    p.optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.05));
  });
  auto& inner = *r.pair.inner;
  auto& outer = *r.pair.outer;
  const auto inner_level = make_level(inner, {&inner, &outer});
  const auto outer_level = make_level(outer);
  run_unroll(*inner_level, nullptr, 3);
  SavedState start(inner);
  torch::manual_seed(11);
  std::vector<torch::Tensor> v;
  for (const auto& p : inner.parameters()) v.push_back(torch::randn_like(p));

  auto run = [&](const mlo::UnrolledOptions& options, mlo::hypergrad::Unrolled::Stats* stats) {
    start.restore();
    mlo::hypergrad::Unrolled method(options);
    run_unroll(*inner_level, &method, steps);
    auto out = method.apply(v, *inner_level, *outer_level);
    if (stats) *stats = method.last_stats();
    return out[0];
  };
  mlo::hypergrad::Unrolled::Stats none_stats;
  const torch::Tensor reference = run(mlo::UnrolledOptions(), &none_stats);
  CHECK(none_stats.max_stored == steps);
  const int64_t state_bytes = none_stats.state_bytes;
  const std::vector<mlo::UnrolledOptions> variants = {
      mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial),
      mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial).snapshots(1),
      mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial).snapshots(3),
      mlo::UnrolledOptions()
          .checkpointing(mlo::UnrollCheckpointing::kBinomial)
          .budget_bytes(2 * state_bytes + 1),
  };
  // A budget below one state would silently mean no snapshot (K^2/2 recomputed steps).
  CHECK_THROWS_WITH(run(mlo::UnrolledOptions()
                            .checkpointing(mlo::UnrollCheckpointing::kBinomial)
                            .budget_bytes(state_bytes - 1),
                        nullptr),
                    "unrolled.budget_bytes " + std::to_string(state_bytes - 1) +
                        " is below the size of one inner state (parameters plus optimizer state, " +
                        std::to_string(state_bytes) +
                        " bytes): no snapshot would fit; raise it or use snapshots");
  const std::vector<int64_t> expected_snapshots = {6, 1, 3, 2};
  for (size_t k = 0; k < variants.size(); ++k) {
    INFO("variant " << k);
    mlo::hypergrad::Unrolled::Stats stats;
    const torch::Tensor out = run(variants[k], &stats);
    CHECK(stats.snapshots == expected_snapshots[k]);
    CHECK(stats.max_stored <= stats.snapshots + 1);
    CHECK(stats.advances == mlo::hypergrad::binomial_advances(steps, stats.snapshots));
    const double diff = (out - reference).abs().max().item<double>();
    INFO("max difference " << diff << " (reference norm " << reference.norm().item<double>()
                           << ")");
    CHECK(diff < 1e-10);
  }
}

TEST_CASE("Unrolled: bad options and unsupported settings fail with their name",
          "[hypergrad][unrolled]") {
  using mlo::UnrolledOptions;
  CHECK_THROWS_WITH(mlo::hypergrad::Unrolled(UnrolledOptions().snapshots(3)),
                    Catch::Contains("binomial"));
  CHECK_THROWS_WITH(mlo::hypergrad::Unrolled(UnrolledOptions()
                                                 .checkpointing(mlo::UnrollCheckpointing::kBinomial)
                                                 .snapshots(2)
                                                 .budget_bytes(100)),
                    Catch::Contains("not both"));
  CHECK_THROWS_WITH(mlo::hypergrad::Unrolled(UnrolledOptions().snapshots(-1)),
                    Catch::Contains("snapshots"));
  Quadratic q =
      Quadratic::make(mlo::ProblemConfig().method(UnrolledOptions()).gradient_clipping(1.0));
  q.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  q.upper->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  mlo::Engine engine;
  engine.add(q.upper).add(q.lower).link(q.upper, q.lower);
  CHECK_THROWS_WITH(engine.initialize(), Catch::Contains("gradient_clipping"));

  // Found at engine start, naming the problem, the key and the state's size.
  Quadratic b = Quadratic::make(mlo::ProblemConfig().method(
      UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial).budget_bytes(1)));
  b.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  b.upper->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  mlo::Engine budget_engine;
  budget_engine.add(b.upper).add(b.lower).link(b.upper, b.lower);
  CHECK_THROWS_WITH(
      budget_engine.initialize(),
      Catch::Contains("unrolled.budget_bytes 1 is below the size of one inner state"));
}

TEST_CASE("Unrolled: gradient accumulation and a learning-rate schedule are replayed",
          "[hypergrad][unrolled]") {
  // Two different micro-batches per optimizer step, and a decaying learning rate.
  LogReg r = make_logreg(mlo::ProblemConfig().gradient_accumulation(2), [](mlo::Problem& p) {
    p.optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.3).momentum(0.5));
    p.scheduler([](int64_t step) { return 1.0 / (1.0 + 0.2 * static_cast<double>(step)); });
  });
  auto& inner = *r.pair.inner;
  auto& outer = *r.pair.outer;
  const auto x = r.data.train.data;
  const auto y = r.data.train.target;
  inner.data(std::vector<mlo::Batch>{mlo::Batch(x.slice(0, 0, 50), y.slice(0, 0, 50)),
                                     mlo::Batch(x.slice(0, 50), y.slice(0, 50))});
  const auto inner_level = make_level(inner, {&inner, &outer});
  const auto outer_level = make_level(outer);
  // NOTE: every run takes an even number of local steps, so the two-batch stream starts each
  // run at the same batch.
  const int64_t local_steps = 16;  // 8 optimizer steps
  // One optimizer step first: SavedState's restore (torch::load) overwrites existing optimizer
  // state but would not remove momentum buffers created after a save of an empty state.
  run_unroll(*inner_level, nullptr, 2);
  SavedState start(inner);
  torch::manual_seed(5);
  std::vector<torch::Tensor> v;
  for (const auto& p : inner.parameters()) v.push_back(torch::randn_like(p));
  // The schedule keeps counting optimizer steps across runs: restart it (and its base learning
  // rate) for each run.
  auto reset_schedule = [&]() {
    for (auto& group : inner.optimizer().param_groups()) group.options().set_lr(0.3);
    const int64_t first = inner.optimizer_steps();
    inner.scheduler(
        [first](int64_t step) { return 1.0 / (1.0 + 0.2 * static_cast<double>(step - first)); });
  };
  reset_schedule();
  mlo::hypergrad::Unrolled method(mlo::test::options_of<mlo::UnrolledOptions>(inner.config()));
  run_unroll(*inner_level, &method, local_steps);
  REQUIRE(method.recorded_steps() == 8);
  const auto out = method.apply(v, *inner_level, *outer_level);

  const torch::Tensor lambda0 = outer.weights().detach().clone();
  auto objective = [&](const torch::Tensor& lambda) {
    start.restore();
    reset_schedule();
    {
      torch::NoGradGuard no_grad;
      outer.weights().copy_(lambda);
    }
    run_unroll(*inner_level, nullptr, local_steps);
    double f = 0;
    const auto params = inner.parameters();
    for (size_t i = 0; i < params.size(); ++i) f += (params[i] * v[i]).sum().item<double>();
    return f;
  };
  const double f0 = objective(lambda0);
  CHECK(objective(lambda0) == f0);  // the runs are reproducible
  const double h = 1e-5;
  for (int64_t j = 0; j < lambda0.numel(); ++j) {
    torch::Tensor plus = lambda0.clone(), minus = lambda0.clone();
    plus[j] += h;
    minus[j] -= h;
    const double fd = (objective(plus) - objective(minus)) / (2 * h);
    INFO("lambda index " << j << ": unrolled " << out[0][j].item<double>() << ", finite "
                         << "difference " << fd);
    CHECK(out[0][j].item<double>() == Approx(fd).epsilon(1e-6).margin(1e-9));
  }
}

namespace {

// A problem with one scalar parameter whose loss couples it to its linked problems.
struct Coupled : mlo::Problem {
  Coupled(std::string name, mlo::ProblemConfig config) : mlo::Problem(std::move(name), config) {
    module(std::make_shared<mlo::testing::ParameterModule>(
        std::vector<std::pair<std::string, torch::Tensor>>{
            {"w", torch::full({1}, 0.5, torch::kDouble)}}));
    optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  }
  torch::Tensor w() const { return module_as<mlo::testing::ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override {
    torch::Tensor loss = w().pow(2).sum();
    for (const auto* p : others) loss = loss + (w() * p->w()).sum();
    if (log_each_call) log_metric("call_" + std::to_string(calls++), 1.0);
    return loss;
  }
  std::vector<const Coupled*> others;
  bool log_each_call = false;
  int64_t calls = 0;
};

}  // namespace

TEST_CASE("Unrolled: refuses two parents and a middle level at engine start",
          "[hypergrad][unrolled]") {
  const auto unrolled = mlo::ProblemConfig().method(mlo::UnrolledOptions());
  {
    auto a = std::make_shared<Coupled>("a", mlo::ProblemConfig());
    auto b = std::make_shared<Coupled>("b", mlo::ProblemConfig());
    auto low = std::make_shared<Coupled>("low", unrolled);
    low->others = {a.get(), b.get()};
    mlo::Engine engine;
    engine.add(a).add(b).add(low).link(a, low).link(b, low);
    CHECK_THROWS_WITH(engine.initialize(),
                      "problem 'low': unrolled supports one parent, this problem has 2 (each "
                      "parent's replay would see the parameters the parents stepped before it "
                      "already updated); use another method");
  }
  {
    auto top = std::make_shared<Coupled>("top", mlo::ProblemConfig());
    auto mid = std::make_shared<Coupled>("mid", unrolled);
    auto low = std::make_shared<Coupled>("low", mlo::ProblemConfig());
    mid->others = {top.get(), low.get()};
    low->others = {mid.get()};
    mlo::Engine engine;
    engine.add(top).add(mid).add(low).link(top, mid).link(mid, low);
    CHECK_THROWS_WITH(engine.initialize(),
                      "problem 'mid': unrolled cannot serve a middle level (a problem with "
                      "problems below it): the replay of its own loss misses the hypergradients "
                      "its steps followed; use another method");
  }
  {
    // One parent, a leaf: accepted.
    auto top = std::make_shared<Coupled>("top", mlo::ProblemConfig());
    auto low = std::make_shared<Coupled>("low", unrolled);
    low->others = {top.get()};
    mlo::Engine engine;
    engine.add(top).add(low).link(top, low);
    CHECK_NOTHROW(engine.initialize());
  }
}

TEST_CASE("Unrolled: the replay leaves the problem's metrics exactly as the step recorded them",
          "[hypergrad][unrolled]") {
  auto top = std::make_shared<Coupled>("top", mlo::ProblemConfig());
  auto low = std::make_shared<Coupled>("low", mlo::ProblemConfig().method(mlo::UnrolledOptions()));
  low->others = {top.get()};
  low->log_each_call = true;  // every training_step logs a new key
  mlo::hypergrad::Unrolled method(mlo::test::options_of<mlo::UnrolledOptions>(low->config()));
  const auto low_level = make_level(*low, {low.get(), top.get()});
  const auto top_level = make_level(*top);
  run_unroll(*low_level, &method, 3);
  const mlo::Metrics before = low->metrics();
  method.apply({torch::ones({1}, torch::kDouble)}, *low_level, *top_level);
  CHECK(low->calls > 3);  // the replay did evaluate the loss
  CHECK(low->metrics() == before);
}

}  // namespace unrolled_test
