// Typed handles between problems (core/handle.h) and the engine's check of the graph's edges at
// each problem's first step: a handle that names no problem, one of another type, one used
// before the engine links it, and a link() whose arguments are swapped are errors naming the
// problems involved, never a crash.
#include "support/names.h"

#include <mlo/core/engine.h>
#include <mlo/core/handle.h>
#include <mlo/core/problem.h>

#include <catch2/catch.hpp>
#include <torch/torch.h>

namespace handle_test {

namespace {

struct Inner;

// The quickstart's pair: Outer learns one L2 weight per feature of Inner's logistic regression.
struct Outer : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Inner> inner{this, "inner"};
  torch::Tensor training_step(const mlo::Batch& b) override;
  torch::Tensor lambda() const { return module().parameters()[0]; }
};

struct Inner : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Outer> outer{this};  // by type: the one Outer
  torch::Tensor logits(const torch::Tensor& x) const {
    return module_as<torch::nn::LinearImpl>()->forward(x).squeeze(-1);
  }
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto& w = module_as<torch::nn::LinearImpl>()->weight;
    return torch::binary_cross_entropy_with_logits(logits(b.data), b.target) +
           0.5 * (outer->lambda() * w.squeeze(0).pow(2)).sum();
  }
};

torch::Tensor Outer::training_step(const mlo::Batch& b) {
  return torch::binary_cross_entropy_with_logits(inner->logits(b.data), b.target);
}

// A problem with a handle to a name the test chooses, of a type the test chooses.
template <typename T>
struct Pointing : mlo::Problem {
  Pointing(std::string name, std::string target) : mlo::Problem(std::move(name)), to(this, target) {}
  mlo::Handle<T> to;
  torch::Tensor training_step(const mlo::Batch& b) override {
    return module_as<torch::nn::LinearImpl>()->forward(b.data).pow(2).mean();
  }
};

struct Pair {
  std::shared_ptr<Outer> outer;
  std::shared_ptr<Inner> inner;
};

Pair make_pair() {
  torch::manual_seed(0);
  const auto x = torch::randn({40, 4});
  const auto y = (x.sum(1) > 0).to(torch::kFloat);
  Pair p;
  p.inner = std::make_shared<Inner>("inner", mlo::ProblemConfig().unroll_steps(2));
  p.inner->module(torch::nn::Linear(4, 1))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{mlo::Batch(x.slice(0, 0, 20), y.slice(0, 0, 20))});
  p.outer = std::make_shared<Outer>("outer");
  p.outer->module(torch::nn::Linear(torch::nn::LinearOptions(4, 1).bias(false)))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{mlo::Batch(x.slice(0, 20), y.slice(0, 20))});
  return p;
}

template <typename P>
std::shared_ptr<P> with_linear(std::shared_ptr<P> p) {
  mlo::Problem& problem = *p;
  problem.module(torch::nn::Linear(3, 1))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{mlo::Batch(torch::randn({4, 3}))});
  return p;
}

}  // namespace

TEST_CASE("Handle: the engine links handles by name and by type at initialization",
          "[core][handle]") {
  Pair p = make_pair();
  CHECK_FALSE(p.outer->inner.linked());
  mlo::Engine engine(mlo::EngineConfig().train_iters(4).valid_step(0).log_step(0));
  engine.add(p.outer).add(p.inner).link(/*upper=*/p.outer, /*lower=*/p.inner);
  engine.initialize();
  CHECK(p.outer->inner.get() == p.inner.get());
  CHECK(p.inner->outer.get() == p.outer.get());
  engine.run();
  CHECK(p.outer->step_count() == 2);
}

TEST_CASE("Handle: used before an engine links it, it is an error naming both problems",
          "[core][handle]") {
  Pair p = make_pair();
  CHECK_THROWS_WITH(p.outer->training_step(mlo::Batch(torch::randn({2, 4}), torch::ones({2}))),
                    mlo_test::Names({"'outer'", "'inner'", "before an engine linked"}));
}

TEST_CASE("Handle: one whose problem was destroyed is an error naming both, not a dangling pointer",
          "[core][handle]") {
  Pair p = make_pair();
  {
    mlo::Engine engine(mlo::EngineConfig().train_iters(1).valid_step(0).log_step(0));
    engine.add(p.outer).add(p.inner).link(p.outer, p.inner);
    engine.run();
  }
  REQUIRE(p.outer->inner.linked());
  CHECK(p.outer->inner.get() == p.inner.get());
  p.inner.reset();  // the last owner of 'inner' (the engine is gone too)
  CHECK_FALSE(p.outer->inner.linked());
  CHECK_THROWS_WITH(p.outer->training_step(mlo::Batch(torch::randn({2, 4}), torch::ones({2}))),
                    mlo_test::Names({"'outer'", "'inner'", "destroyed"}));
  // The other way round: a destroyed holder leaves nothing behind in the problem it named.
  Pair q = make_pair();
  {
    mlo::Engine engine;
    engine.add(q.outer).add(q.inner).link(q.outer, q.inner);
    engine.initialize();
  }
  q.outer.reset();
  q.inner.reset();  // (its destructor would reach the freed handle if it were still listed)
}

TEST_CASE("Handle: one that names no problem of the engine, or one of another type, is refused",
          "[core][handle]") {
  {
    auto lone = with_linear(std::make_shared<Pointing<Outer>>("lone", "missing"));
    mlo::Engine engine;
    engine.add(lone);
    CHECK_THROWS_WITH(engine.initialize(), mlo_test::Names({"'lone'", "'missing'", ": lone)"}));
  }
  {
    Pair p = make_pair();
    auto wrong = with_linear(std::make_shared<Pointing<Outer>>("wrong", "inner"));
    mlo::Engine engine;
    engine.add(p.outer).add(p.inner).add(wrong).link(p.outer, p.inner).link(p.outer, wrong);
    CHECK_THROWS_WITH(engine.initialize(),
                      mlo_test::Names({"'wrong'", "'inner'", "Outer", "Inner"}));
  }
  {
    // By type: none, then several.
    auto by_type = with_linear(std::make_shared<Pointing<Outer>>("by_type", ""));
    mlo::Engine engine;
    engine.add(by_type);
    CHECK_THROWS_WITH(engine.initialize(),
                      mlo_test::Names({"'by_type'", "Outer", "no such problem"}));
    Pair a = make_pair();
    auto second = std::make_shared<Outer>("second");
    second->module(torch::nn::Linear(torch::nn::LinearOptions(4, 1).bias(false)))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
    mlo::Engine two;
    two.add(a.outer).add(second).add(a.inner).link(a.outer, a.inner).link(second, a.inner);
    CHECK_THROWS_WITH(two.initialize(), mlo_test::Names({"'inner'", "(outer, second)"}));
  }
}

TEST_CASE("Engine: a swapped link(upper, lower) is an error at the first step, naming both",
          "[core][handle]") {
  // link(inner, outer): inner above outer. Outer's loss reads inner's parameters (so u2l
  // inner -> outer holds), but outer, now the lower problem, has a loss that does not reach its
  // own parameters: its steps would change nothing.
  Pair p = make_pair();
  mlo::Engine engine(mlo::EngineConfig().train_iters(2).valid_step(0).log_step(0));
  engine.add(p.outer).add(p.inner).link(/*upper=*/p.inner, /*lower=*/p.outer);
  CHECK_THROWS_WITH(engine.run(), mlo_test::Names({"'outer'", "link(upper, lower)"}));
  CHECK(p.outer->optimizer_steps() == 0);
}

TEST_CASE("Engine: an edge the losses do not have is an error at the first step, naming it",
          "[core][handle]") {
  // u2l other -> inner, but inner's loss reads only outer's weights.
  Pair p = make_pair();
  auto other = with_linear(std::make_shared<Pointing<Inner>>("other", "inner"));
  mlo::Engine engine(mlo::EngineConfig().train_iters(2).valid_step(0).log_step(0));
  engine.add(p.outer).add(other).add(p.inner).link(p.outer, p.inner).link(other, p.inner);
  CHECK_THROWS_WITH(engine.run(), mlo_test::Names({"'inner'", "'other'", "u2l other -> inner"}));
}

}  // namespace handle_test
