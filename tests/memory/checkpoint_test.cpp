// Activation checkpointing is exact: gradients, Hessian-vector products, dropout, batch norm and
// autocast through checkpointed blocks equal the plain ones.
#include <mlo/base/error.h>
#include <mlo/memory/checkpoint.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

namespace checkpoint_test {

using mlo::memory::checkpoint_range;
using mlo::memory::CheckpointPlan;
using mlo::memory::Segment;

namespace {

// tanh(linear(x)), or linear(x) alone: one block of the test chains.
struct TanhLinearImpl : torch::nn::Cloneable<TanhLinearImpl> {
  TanhLinearImpl(int64_t in, int64_t out, bool tanh) : in(in), out(out), tanh(tanh) { reset(); }
  void reset() override { fc = register_module("fc", torch::nn::Linear(in, out)); }
  torch::Tensor forward(const torch::Tensor& x) { return tanh ? torch::tanh(fc(x)) : fc(x); }
  int64_t in, out;
  bool tanh;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TanhLinear);

// Five blocks of tanh/linear layers in double precision.
mlo::nn::Chain tanh_chain() {
  torch::manual_seed(3);
  mlo::nn::Chain chain;
  chain->push_back("b0", TanhLinear(5, 7, true))
      .push_back("b1", TanhLinear(7, 7, true))
      .push_back("b2", TanhLinear(7, 6, true))
      .push_back("b3", TanhLinear(6, 6, true))
      .push_back("b4", TanhLinear(6, 3, false));
  chain->to(torch::kDouble);
  return chain;
}

void install(mlo::nn::ChainImpl& chain, std::vector<Segment> segments) {
  CheckpointPlan plan;
  plan.segments = std::move(segments);
  mlo::memory::apply_plan(chain, plan);
}

// Largest |a - b| over two lists of tensors.
double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("tensor " << i);
    REQUIRE(a[i].defined() == b[i].defined());
    if (a[i].defined()) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

struct Derivatives {
  std::vector<torch::Tensor> grad, hvp;
  torch::Tensor input_grad;
};

// Gradient of a nonlinear loss in the parameters and the input (create_graph), then the
// Hessian-vector product d/dtheta <grad, v>.
Derivatives derivatives(mlo::nn::ChainImpl& chain, const torch::Tensor& x,
                        const std::vector<torch::Tensor>& v) {
  const auto params = chain.parameters();
  auto inputs = params;
  inputs.push_back(x);
  const auto y = chain.forward(x);
  const auto loss = (y * y).sum() + y.sin().sum();
  auto g = torch::autograd::grad({loss}, inputs, {}, /*retain_graph=*/true,
                                 /*create_graph=*/true);
  Derivatives out;
  out.input_grad = g.back().detach();
  g.pop_back();
  torch::Tensor dot = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < g.size(); ++i) dot = dot + (g[i] * v[i]).sum();
  for (const auto& t : g) out.grad.push_back(t.detach());
  out.hvp = torch::autograd::grad({dot}, params);
  return out;
}

}  // namespace

TEST_CASE("Checkpoint: gradients and Hessian-vector products equal the plain ones (1e-10)",
          "[memory][checkpoint]") {
  auto chain = tanh_chain();
  const auto x = torch::randn({4, 5}, torch::kDouble).requires_grad_(true);
  std::vector<torch::Tensor> v;
  for (const auto& p : chain->parameters()) v.push_back(torch::randn_like(p));
  const Derivatives plain = derivatives(*chain, x, v);

  const std::vector<std::vector<Segment>> plans = {
      {{0, 2, true}, {2, 4, true}, {4, 5, false}},  // two checkpointed segments
      {{0, 1, false}, {1, 5, true}},                // input of the segment has history
      {{0, 5, true}},                               // the whole chain
      {{0, 1, true}, {1, 2, true}, {2, 3, true}, {3, 4, true}, {4, 5, true}}};
  for (size_t k = 0; k < plans.size(); ++k) {
    INFO("plan " << k);
    install(*chain, plans[k]);
    const Derivatives ckpt = derivatives(*chain, x, v);
    CHECK(max_diff(plain.grad, ckpt.grad) < 1e-10);
    CHECK(max_diff({plain.input_grad}, {ckpt.input_grad}) < 1e-10);
    CHECK(max_diff(plain.hvp, ckpt.hvp) < 1e-10);
  }
}

TEST_CASE("Checkpoint: Hessian-vector products through batch norm in train mode (1e-10)",
          "[memory][checkpoint]") {
  torch::manual_seed(4);
  mlo::nn::Chain chain;
  chain->push_back("fc1", TanhLinear(5, 8, false))
      .push_back("bn", torch::nn::BatchNorm1d(8))
      .push_back("fc2", TanhLinear(8, 8, true))
      .push_back("head", TanhLinear(8, 2, false));
  chain->to(torch::kDouble);
  const auto x = torch::randn({12, 5}, torch::kDouble).requires_grad_(true);
  std::vector<torch::Tensor> v;
  for (const auto& p : chain->parameters()) v.push_back(torch::randn_like(p));
  const Derivatives plain = derivatives(*chain, x, v);
  install(*chain, mlo::memory::make_segments(chain->size(), {{0, 3}}));
  const Derivatives ckpt = derivatives(*chain, x, v);
  CHECK(max_diff(plain.grad, ckpt.grad) < 1e-10);
  CHECK(max_diff(plain.hvp, ckpt.hvp) < 1e-10);
  // Two steps, one forward each: the statistics advanced twice, not four times.
  const auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(chain->block_module(1));
  REQUIRE(bn);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("Checkpoint: frozen parameters, an input without grad, nested segments",
          "[memory][checkpoint]") {
  auto chain = tanh_chain();
  chain->block_module(1)->parameters()[0].requires_grad_(false);  // b1's weight frozen
  const auto x = torch::randn({3, 5}, torch::kDouble);            // data: no grad
  const auto params = chain->parameters();
  std::vector<torch::Tensor> trainable;
  for (const auto& p : params) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  const auto plain = torch::autograd::grad({chain->forward(x).pow(2).sum()}, trainable);
  install(*chain, {{0, 3, true}, {3, 5, true}});
  const auto ckpt = torch::autograd::grad({chain->forward(x).pow(2).sum()}, trainable);
  CHECK(max_diff(plain, ckpt) < 1e-12);

  // A checkpoint whose block checkpoints a part of itself again.
  chain->clear_executor();
  mlo::nn::ChainImpl* c = chain.get();
  const auto nested = mlo::memory::checkpoint(
      [c](const torch::Tensor& h) {
        return c->forward_range(checkpoint_range(*c, h, 0, 2), 2, c->size());
      },
      x, chain->parameters(), chain->buffers());
  const auto twice = torch::autograd::grad({nested.pow(2).sum()}, trainable);
  CHECK(max_diff(plain, twice) < 1e-12);
}

TEST_CASE("Checkpoint: dropout masks and the caller's random stream are identical",
          "[memory][checkpoint]") {
  torch::manual_seed(0);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(16, 32))
      .push_back("drop", torch::nn::Dropout(0.5))
      .push_back("fc2", torch::nn::Linear(32, 32))
      .push_back("drop2", torch::nn::Dropout(0.3))
      .push_back("head", torch::nn::Linear(32, 4));
  chain->train();
  const auto x = torch::randn({8, 16});

  auto run = [&](bool checkpointed) {
    if (checkpointed) {
      install(*chain, {{0, 4, true}, {4, 5, false}});
    } else {
      chain->clear_executor();
    }
    torch::manual_seed(42);
    const auto y = chain->forward(x);
    auto grads = torch::autograd::grad({y.pow(2).sum()}, chain->parameters());
    grads.push_back(y.detach());
    grads.push_back(torch::rand({5}));  // the caller's stream after backward
    return grads;
  };
  const auto plain = run(false);
  const auto ckpt = run(true);
  CHECK(max_diff(plain, ckpt) == 0.0);
}

TEST_CASE("Checkpoint: batch norm statistics advance exactly once per step",
          "[memory][checkpoint]") {
  auto make = [] {
    torch::manual_seed(1);
    mlo::nn::Chain chain;
    chain->push_back("fc", torch::nn::Linear(6, 8))
        .push_back("bn", torch::nn::BatchNorm1d(8))
        .push_back("head", torch::nn::Linear(8, 2));
    return chain;
  };
  auto plain = make();
  auto ckpt = make();
  install(*ckpt, {{0, 2, true}, {2, 3, false}});
  const auto x = torch::randn({10, 6});
  for (int step = 1; step <= 3; ++step) {
    for (auto* chain : {&plain, &ckpt}) {
      const auto y = (*chain)->forward(x + step);
      torch::autograd::grad({y.pow(2).sum()}, (*chain)->parameters());
    }
    const auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(ckpt->block_module(1));
    const auto bn_plain =
        std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(plain->block_module(1));
    REQUIRE(bn);
    CHECK(bn->num_batches_tracked.item<int64_t>() == step);
    CHECK(torch::allclose(bn->running_mean, bn_plain->running_mean, 0, 1e-7));
    CHECK(torch::allclose(bn->running_var, bn_plain->running_var, 0, 1e-7));
  }
}

TEST_CASE("Checkpoint: the forward's bf16 autocast is re-entered for recomputation",
          "[memory][checkpoint]") {
  torch::manual_seed(5);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(32, 64))
      .push_back("act", torch::nn::ReLU())
      .push_back("fc2", torch::nn::Linear(64, 8));
  const auto x = torch::randn({16, 32});
  auto run = [&](bool checkpointed) {
    if (checkpointed) {
      install(*chain, {{0, 2, true}, {2, 3, false}});
    } else {
      chain->clear_executor();
    }
    torch::Tensor y;
    {
      mlo::memory::AutocastGuard autocast(mlo::Precision::kBF16, torch::kCPU);
      y = chain->forward(x);
    }
    return torch::autograd::grad({y.to(torch::kFloat).pow(2).sum()}, chain->parameters());
  };
  const auto plain = run(false);
  const auto ckpt = run(true);
  CHECK(max_diff(plain, ckpt) == 0.0);
}

TEST_CASE("Checkpoint: no grad mode, identity ranges and in-place inputs", "[memory][checkpoint]") {
  auto chain = tanh_chain();
  const auto x = torch::randn({2, 5}, torch::kDouble).requires_grad_(true);
  {
    torch::NoGradGuard no_grad;
    CHECK(torch::allclose(checkpoint_range(*chain, x, 0, 5), chain->forward_range(x, 0, 5)));
  }
  CHECK(checkpoint_range(*chain, x, 2, 2).is_same(x));
  CHECK_THROWS_AS(checkpoint_range(*chain, x, 3, 6), mlo::Error);

  const auto h = chain->forward_range(x, 0, 1);
  CHECK_THROWS_AS(mlo::memory::checkpoint([](const torch::Tensor& t) { return t.mul_(2); }, h,
                                          chain->parameters()),
                  mlo::Error);
}

}  // namespace checkpoint_test
