// The data-reweighting pair: the classifier's loss is the (normalized) weighted cross-entropy,
// and the reweighter receives a hypergradient through it.
#include "problems/reweighting/reweighting.h"

#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/mwn.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace reweighting_test {

namespace rw = mlo::problems::reweighting;

namespace {

struct Pair {
  std::shared_ptr<rw::Classifier> classifier;
  std::shared_ptr<rw::Reweighter> reweighter;
};

Pair make_pair(const mlo::Batch& train, const mlo::Batch& meta) {
  torch::manual_seed(0);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(6, 16))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(16, 3));
  Pair p;
  p.classifier = std::make_shared<rw::Classifier>("classifier", mlo::ProblemConfig());
  p.classifier->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{train});
  p.reweighter = std::make_shared<rw::Reweighter>("reweighter");
  p.reweighter->module(mlo::nn::MWN(8))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0))
      .data(std::vector<mlo::Batch>{meta});
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()));
  return p;
}

}  // namespace

TEST_CASE("Reweighting: the classifier loss is the weighted cross-entropy",
          "[problems][reweighting]") {
  torch::manual_seed(1);
  const mlo::Batch train(torch::randn({12, 6}), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}), torch::randint(3, {9}));
  auto p = make_pair(train, meta);
  const auto logits = p.classifier->logits(train.data);
  const auto losses = torch::cross_entropy_loss(logits, train.target, {}, at::Reduction::None);
  const auto w = p.reweighter->weights(losses.detach(), train.target);
  REQUIRE(w.sizes() == losses.sizes());

  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).normalize(true));
  const double normalized = p.classifier->training_step(train).item<double>();
  CHECK(normalized == Approx(((w * losses).sum() / w.sum()).item<double>()).epsilon(1e-6));
  CHECK(p.classifier->metrics().at("weight_mean") == Approx(w.mean().item<double>()));

  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).normalize(false));
  const double plain = p.classifier->training_step(train).item<double>();
  CHECK(plain == Approx((w * losses).mean().item<double>()).epsilon(1e-6));

  p.classifier->weighting(rw::PlainOptions());  // the baseline: the plain mean
  CHECK(p.classifier->training_step(train).item<double>() ==
        Approx(losses.mean().item<double>()).epsilon(1e-6));
}

TEST_CASE("Reweighting: one meta step moves the reweighter along its DARTS hypergradient",
          "[problems][reweighting]") {
  torch::manual_seed(2);
  const mlo::Batch train(torch::randn({16, 6}), torch::randint(3, {16}));
  const mlo::Batch meta(torch::randn({9, 6}), torch::randint(3, {9}));
  auto p = make_pair(train, meta);
  std::vector<torch::Tensor> before;
  for (const auto& t : p.reweighter->parameters()) before.push_back(t.detach().clone());
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
  engine.run();
  REQUIRE(p.reweighter->step_count() == 1);
  std::vector<torch::Tensor> after;
  for (const auto& t : p.reweighter->parameters()) after.push_back(t.detach().clone());

  // Recompute the DARTS hypergradient by hand at the reweighter's old parameters and the
  // classifier's stepped ones: v = dL_meta/dw, eps = 0.01/|v|, g(+-) = dL_train(w +- eps v)/dphi.
  auto phi = p.reweighter->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < phi.size(); ++i) phi[i].copy_(before[i]);
  }
  auto w = p.classifier->parameters();
  auto v = torch::autograd::grad({p.reweighter->training_step(meta)}, w);
  double norm = 0;
  for (const auto& t : v) norm += t.pow(2).sum().item<double>();
  const double eps = 0.01 / std::sqrt(norm);
  auto shifted_grad = [&](double sign) {
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < w.size(); ++i) w[i].add_(v[i], sign * eps);
    }
    auto g = torch::autograd::grad({p.classifier->training_step(train)}, phi);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < w.size(); ++i) w[i].sub_(v[i], sign * eps);
    }
    return g;
  };
  const auto plus = shifted_grad(+1), minus = shifted_grad(-1);
  for (size_t i = 0; i < phi.size(); ++i) {
    const auto hyper = (minus[i] - plus[i]) / (2 * eps);
    const auto expected = before[i] - 1.0 * hyper;  // SGD, lr 1
    const double diff = (after[i] - expected).abs().max().item<double>();
    INFO("reweighter parameter " << i << ": max |difference| " << diff);
    CHECK(diff < 1e-4);
  }
  CHECK((after[0] - before[0]).abs().sum().item<double>() > 0);
  CHECK(p.reweighter->metrics().count("acc") == 1);
}

namespace {

// The reweighting pair in float64, so finite differences can be compared tightly.
Pair make_double_pair(const mlo::Batch& train, const mlo::Batch& meta,
                      const mlo::ProblemConfig& classifier_config) {
  torch::manual_seed(5);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(6, 16))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(16, 3));
  chain->to(torch::kDouble);
  mlo::nn::MWN mwn(8);
  mwn->to(torch::kDouble);
  Pair p;
  p.classifier = std::make_shared<rw::Classifier>("classifier", classifier_config);
  p.classifier->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{train});
  p.reweighter = std::make_shared<rw::Reweighter>("reweighter");
  p.reweighter->module(mwn)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0))
      .data(std::vector<mlo::Batch>{meta});
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).normalize(false));
  return p;
}

// -d/dphi ( dL/dw . v ) for L(w, phi) = mean(MWN_phi(m(w)) * l(w)), computed directly by double
// backward, where m(w) is the MWN's input: l(w) itself when `frozen_input` is false, or the
// constant l(w0) at the current weights when it is true.
std::vector<torch::Tensor> mixed_product(Pair& p, const mlo::Batch& train,
                                         const std::vector<torch::Tensor>& v, bool frozen_input) {
  const auto w = p.classifier->parameters();
  const auto phi = p.reweighter->parameters();
  const auto logits = p.classifier->module_as<mlo::nn::ChainImpl>()->forward(train.data);
  const auto losses = torch::cross_entropy_loss(logits, train.target, {}, at::Reduction::None);
  const auto input = frozen_input ? losses.detach().clone() : losses;
  const auto weights =
      p.reweighter->module_as<mlo::nn::MWNImpl>()->forward(input.unsqueeze(1)).squeeze(1);
  const auto loss = (weights * losses).mean();
  const auto g = torch::autograd::grad({loss}, w, {}, /*retain_graph=*/true,
                                       /*create_graph=*/true);
  torch::Tensor gv = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < g.size(); ++i) gv = gv + (g[i] * v[i]).sum();
  auto out = torch::autograd::grad({gv}, phi, {}, /*retain_graph=*/false,
                                   /*create_graph=*/false, /*allow_unused=*/true);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = out[i].defined() ? -out[i] : torch::zeros_like(phi[i]);
  }
  return out;
}

void require_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                   double rel) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]).pow(2).sum().item<double>();
    den += want[i].pow(2).sum().item<double>();
  }
  const double error = std::sqrt(num / den);
  INFO("relative error " << error << " (|oracle| = " << std::sqrt(den) << ")");
  CHECK(den > 0);
  CHECK(error < rel);
}

}  // namespace

// Runs one engine step with zero learning rates, so that the classifier's latest batch is `train`
// and nothing moved, then applies the classifier's hypergradient method to `v`.
std::vector<torch::Tensor> apply_after_one_step(Pair& p, const std::vector<torch::Tensor>& v) {
  for (auto* problem : {static_cast<mlo::Problem*>(p.classifier.get()),
                        static_cast<mlo::Problem*>(p.reweighter.get())}) {
    for (auto& group : problem->optimizer().param_groups()) group.options().set_lr(0.0);
  }
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
  engine.run();
  auto method = p.classifier->config().method().make();
  return method->apply(v, engine.level(*p.classifier), engine.level(*p.reweighter));
}

TEST_CASE("Reweighting: DARTS differentiates the update with the weights' input frozen",
          "[problems][reweighting][hypergrad]") {
  // The fix of docs/reweighting.md: DARTS re-evaluates the classifier loss at w +- eps v, and the
  // weight net now reads the losses of the classifier's own step there, so its central
  // difference is -d/dphi (g . v) with g the gradient at frozen weight inputs (as Meta-Weight-Net
  // and the implicit methods), to O(eps^2), and no longer the full mixed product.
  torch::manual_seed(6);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  auto p =
      make_double_pair(train, meta, mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4)));
  REQUIRE(p.classifier->weighting_as<rw::WeightNetOptions>()->freeze_inputs());  // default
  std::vector<torch::Tensor> v;
  for (const auto& t : p.classifier->parameters()) v.push_back(torch::randn_like(t));
  const auto got = apply_after_one_step(p, v);
  const auto frozen = mixed_product(p, train, v, /*frozen_input=*/true);
  const auto full = mixed_product(p, train, v, /*frozen_input=*/false);
  require_close(got, frozen, 1e-6);
  // The two products differ by far more than the tolerance: the test can tell them apart.
  double num = 0, den = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    num += (full[i] - frozen[i]).pow(2).sum().item<double>();
    den += frozen[i].pow(2).sum().item<double>();
  }
  INFO("relative difference of the full and frozen products " << std::sqrt(num / den));
  CHECK(std::sqrt(num / den) > 1e-3);
}

TEST_CASE("Reweighting: without frozen inputs DARTS equals the full mixed product",
          "[problems][reweighting][hypergrad]") {
  // freeze_weight_inputs: false (the behaviour before the fix, kept for comparison): the
  // weight net reads the losses at w +- eps v, so DARTS also differentiates through its input.
  torch::manual_seed(6);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  auto p =
      make_double_pair(train, meta, mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4)));
  p.classifier->weighting(
      rw::WeightNetOptions(p.reweighter.get()).normalize(false).freeze_inputs(false));
  std::vector<torch::Tensor> v;
  for (const auto& t : p.classifier->parameters()) v.push_back(torch::randn_like(t));
  const auto got = apply_after_one_step(p, v);
  require_close(got, mixed_product(p, train, v, /*frozen_input=*/false), 1e-6);
}

namespace {

// SAMA's options, except that they claim nothing about its re-evaluations, so the classifier
// re-evaluates its loss with the full graph.
struct SamaWithGraph : mlo::MethodOptionsFor<SamaWithGraph> {
  static constexpr const char* kName = "sama_with_graph";
  std::unique_ptr<mlo::Hypergradient> make() const override {
    return mlo::SamaOptions().alpha(1e-4).make();
  }
};

}  // namespace

TEST_CASE("Reweighting: a finite-difference re-evaluation without the classifier's graph "
          "gives the numbers of one with it (sama)",
          "[problems][reweighting][hypergrad]") {
  // SAMA, like DARTS, differentiates its re-evaluations only with respect to the weight net
  // (`MethodOptions::reevaluation`), so with frozen inputs the classifier's forward runs without
  // a graph. The learning rates stay nonzero: SAMA's direction scales v by the SGD step's lr.
  torch::manual_seed(6);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  std::vector<torch::Tensor> v;
  auto result = [&](const mlo::ProblemConfig& config) {
    auto p = make_double_pair(train, meta, config);
    if (v.empty()) {
      for (const auto& t : p.classifier->parameters()) v.push_back(torch::randn_like(t));
    }
    mlo::Engine engine(mlo::EngineConfig().train_iters(1));
    engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
    engine.run();
    // As the engine's path runs the hop: the classifier's parameters take no gradient in the
    // re-evaluations exactly when the method's options say so.
    const auto& options = p.classifier->config().method();
    auto method = options.make();
    const mlo::Path path({{&engine.level(*p.classifier), &engine.level(*p.reweighter),
                           method.get(), options.reevaluation().upper_gradients_only}});
    return path.propagate(v);
  };
  REQUIRE(mlo::SamaOptions().reevaluation().upper_gradients_only);
  REQUIRE_FALSE(SamaWithGraph().reevaluation().upper_gradients_only);
  const auto without_graph = result(mlo::ProblemConfig().method(mlo::SamaOptions().alpha(1e-4)));
  const auto with_graph = result(mlo::ProblemConfig().method(SamaWithGraph()));
  require_close(without_graph, with_graph, 1e-12);
}

TEST_CASE("Reweighting: frozen inputs are the losses of the step, before its update",
          "[problems][reweighting]") {
  // With a nonzero learning rate the classifier moves; re-evaluating its loss afterwards (as a
  // hypergradient does) must weight each sample by MWN(l_i(w_before)), not MWN(l_i(w_after)).
  torch::manual_seed(8);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  auto p = make_double_pair(train, meta, mlo::ProblemConfig());
  const auto chain = p.classifier->module_as<mlo::nn::ChainImpl>();
  const auto before =
      torch::cross_entropy_loss(chain->forward(train.data), train.target, {}, at::Reduction::None)
          .detach();
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
  engine.run();
  torch::NoGradGuard no_grad;
  const auto after =
      torch::cross_entropy_loss(chain->forward(train.data), train.target, {}, at::Reduction::None);
  REQUIRE((after - before).abs().max().item<double>() > 1e-4);  // the classifier moved
  const auto w_before = p.reweighter->weights(before, train.target);
  const double want = (w_before * after).mean().item<double>();  // normalize_weights is off
  CHECK(engine.level(*p.classifier).loss().item<double>() == Approx(want).epsilon(1e-12));
}

TEST_CASE(
    "Reweighting: the implicit methods differentiate the update with the weights' input "
    "frozen",
    "[problems][reweighting][hypergrad]") {
  // The classifier's update treats the per-sample weights as constants (the MWN reads detached
  // losses), so Neumann with no extra term (H^-1 ~ alpha I, alpha 1) returns exactly
  // -d/dphi (g . v) with g the gradient at frozen weight inputs, as in Meta-Weight-Net.
  torch::manual_seed(7);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  auto p = make_double_pair(
      train, meta, mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(0).alpha(1.0)));
  std::vector<torch::Tensor> v;
  for (const auto& t : p.classifier->parameters()) v.push_back(torch::randn_like(t));
  const auto got = apply_after_one_step(p, v);
  require_close(got, mixed_product(p, train, v, /*frozen_input=*/true), 1e-10);
}

TEST_CASE("Reweighting: with batch norm only the classifier's own step moves running statistics",
          "[problems][reweighting]") {
  // The meta forward (reweighter's loss) and DARTS' re-evaluations at w +- eps v run the
  // classifier in train mode too; what they write into its running statistics must be undone,
  // so after one meta-iteration the statistics are one momentum update on the training batch.
  torch::manual_seed(10);
  const mlo::Batch train(torch::randn({16, 6}) + 2.0, torch::randint(3, {16}));
  const mlo::Batch meta(torch::randn({9, 6}) - 3.0, torch::randint(3, {9}));
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(6, 16))
      .push_back("bn", torch::nn::BatchNorm1d(16))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(16, 3));
  auto classifier = std::make_shared<rw::Classifier>(
      "classifier", mlo::ProblemConfig().method(mlo::DartsOptions()));
  classifier->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
      .data(std::vector<mlo::Batch>{train});
  auto reweighter = std::make_shared<rw::Reweighter>("reweighter");
  reweighter->module(mlo::nn::MWN(8))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0))
      .data(std::vector<mlo::Batch>{meta});
  classifier->weighting(rw::WeightNetOptions(reweighter.get()));
  // Expected: a copy of the BN layer after one train-mode forward on the training batch.
  torch::Tensor want_mean, want_var;
  {
    torch::NoGradGuard no_grad;
    auto bn = torch::nn::BatchNorm1d(16);
    auto fc1 = chain->named_children()[0].value()->as<torch::nn::Linear>();
    bn->forward(fc1->forward(train.data));
    want_mean = bn->running_mean.clone();
    want_var = bn->running_var.clone();
  }
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(reweighter).add(classifier).link(reweighter, classifier);
  engine.run();
  REQUIRE(reweighter->step_count() == 1);
  auto bn = chain->named_children()[1].value()->as<torch::nn::BatchNorm1d>();
  INFO("running_mean " << bn->running_mean << "\nwant " << want_mean);
  CHECK(torch::allclose(bn->running_mean, want_mean, 1e-6, 1e-6));
  CHECK(torch::allclose(bn->running_var, want_var, 1e-6, 1e-6));
}

TEST_CASE("Reweighting: a roll-back redo is an own step, with the updated weight net",
          "[problems][reweighting]") {
  // With roll_back the classifier's step is redone on the same batch after the reweighter moved;
  // the redo must train the classifier (a full forward, not DARTS' graph-free re-evaluation)
  // with the new weight net on the losses at the rewound weights.
  torch::manual_seed(11);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  auto p = make_double_pair(train, meta, mlo::ProblemConfig().roll_back(true));
  std::vector<torch::Tensor> w0;
  for (const auto& t : p.classifier->parameters()) w0.push_back(t.detach().clone());
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
  engine.run();
  REQUIRE(p.reweighter->step_count() == 1);
  std::vector<torch::Tensor> w1;
  for (const auto& t : p.classifier->parameters()) w1.push_back(t.detach().clone());
  // Expected: w0 - 0.1 * d/dw mean(MWN_phi1(l(w0)) l(w), at w0.
  auto w = p.classifier->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < w.size(); ++i) w[i].copy_(w0[i]);
  }
  const auto chain = p.classifier->module_as<mlo::nn::ChainImpl>();
  const auto losses =
      torch::cross_entropy_loss(chain->forward(train.data), train.target, {}, at::Reduction::None);
  const auto weights = p.reweighter->weights(losses.detach(), train.target).detach();
  const auto g = torch::autograd::grad({(weights * losses).mean()}, w);
  for (size_t i = 0; i < w.size(); ++i) {
    const auto want = w0[i] - 0.1 * g[i];
    INFO("parameter " << i << ": max |difference| " << (w1[i] - want).abs().max().item<double>());
    CHECK(torch::allclose(w1[i], want, 1e-10, 1e-12));
  }
}

}  // namespace reweighting_test
