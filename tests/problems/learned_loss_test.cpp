// The learned loss: its closed form and gradient, logit adjustment as its starting point, its
// DARTS and CG hypergradients against exact ones on a problem small enough to solve, and the
// YAML that selects it. Also label noise in the reweighting experiment: only training labels
// change.
#include "problems/reweighting/class_priors.h"
#include "problems/reweighting/experiment.h"
#include "problems/reweighting/learned_loss.h"
#include "problems/reweighting/reweighting.h"
#include "support/names.h"
#include "support/relative_error.h"
#include "support/three_samples.h"
#include "support/tiny_reweighting.h"

#include <mlo/data/long_tail.h>
#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace learned_loss_test {

namespace rw = mlo::problems::reweighting;
using Catch::Matchers::Contains;
using mlo::testing::relative_error;

namespace {

// Terms in float64 with the given values.
rw::LogitTerms terms_with(const std::vector<double>& a, const std::vector<double>& b,
                          const std::vector<double>& d) {
  rw::LogitTerms terms(std::vector<int64_t>(a.size(), 1), 0.0, !d.empty());
  terms->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  terms->log_scale.copy_(torch::tensor(a, torch::kDouble));
  terms->shift.copy_(torch::tensor(b, torch::kDouble));
  if (!d.empty()) terms->log_weight.copy_(torch::tensor(d, torch::kDouble));
  return terms;
}

// A classifier (identity model on three_samples) trained through `terms`.
struct Pair {
  std::shared_ptr<rw::Classifier> classifier;
  std::shared_ptr<rw::Reweighter> reweighter;
};

Pair pair_with(const rw::LogitTerms& terms, bool normalize = true) {
  Pair p;
  p.reweighter = std::make_shared<rw::Reweighter>("reweighter");
  p.reweighter->module(terms);
  p.classifier = std::make_shared<rw::Classifier>(
      "classifier", mlo::ProblemConfig(),
      rw::LearnedLossOptions(p.reweighter.get()).normalize(normalize));
  p.classifier->module(mlo_test::identity_chain());
  p.classifier->num_classes = 2;
  return p;
}

}  // namespace

TEST_CASE("Learned loss: CE(z exp(a) + b, y), class weights, and its gradient in closed form",
          "[problems][reweighting]") {
  // z_i = x_i (identity model): (1, 0), (0, 0), (0, 2); y = 0, 1, 0.
  const double a[2] = {std::log(2.0), -0.5}, b[2] = {0.5, -0.3}, d[2] = {0.2, -0.7};
  const double z[3][2] = {{1, 0}, {0, 0}, {0, 2}};
  const int64_t y[3] = {0, 1, 0};
  // The closed form: l_i = log(sum_j exp(z'_ij)) - z'_iy, z'_ij = z_ij e^{a_j} + b_j;
  // dl_i/db_j = p_ij - [y_i = j], dl_i/da_j = (p_ij - [y_i = j]) z_ij e^{a_j}.
  double l[3], gb[3][2], ga[3][2];
  for (int i = 0; i < 3; ++i) {
    double zp[2];
    for (int j = 0; j < 2; ++j) zp[j] = z[i][j] * std::exp(a[j]) + b[j];
    const double lse = std::log(std::exp(zp[0]) + std::exp(zp[1]));
    l[i] = lse - zp[y[i]];
    for (int j = 0; j < 2; ++j) {
      const double r = std::exp(zp[j] - lse) - (y[i] == j ? 1.0 : 0.0);
      gb[i][j] = r;
      ga[i][j] = r * z[i][j] * std::exp(a[j]);
    }
  }
  SECTION("no class weights: the mean") {
    auto p = pair_with(terms_with({a[0], a[1]}, {b[0], b[1]}, {}));
    const auto loss = p.classifier->training_step(mlo_test::three_samples());
    CHECK(loss.item<double>() == Approx((l[0] + l[1] + l[2]) / 3).epsilon(1e-14));
    const auto terms = p.reweighter->logit_terms();
    const auto g = torch::autograd::grad({loss}, {terms->log_scale, terms->shift});
    for (int j = 0; j < 2; ++j) {
      CHECK(g[0][j].item<double>() ==
            Approx((ga[0][j] + ga[1][j] + ga[2][j]) / 3).epsilon(1e-12).margin(1e-15));
      CHECK(g[1][j].item<double>() ==
            Approx((gb[0][j] + gb[1][j] + gb[2][j]) / 3).epsilon(1e-12).margin(1e-15));
    }
  }
  SECTION("class weights c = exp(d), normalized and not") {
    const double c[3] = {std::exp(d[0]), std::exp(d[1]), std::exp(d[0])};
    const double sum = c[0] + c[1] + c[2];
    const double weighted = c[0] * l[0] + c[1] * l[1] + c[2] * l[2];
    auto p = pair_with(terms_with({a[0], a[1]}, {b[0], b[1]}, {d[0], d[1]}));
    const auto loss = p.classifier->training_step(mlo_test::three_samples());
    CHECK(loss.item<double>() == Approx(weighted / sum).epsilon(1e-14));
    // d/dd_k (sum c_i l_i / sum c_i) = sum_{i: y_i = k} c_i (l_i - L) / sum c_i.
    const double big_l = weighted / sum;
    const auto g = torch::autograd::grad({loss}, {p.reweighter->logit_terms()->log_weight});
    CHECK(g[0][0].item<double>() ==
          Approx((c[0] * (l[0] - big_l) + c[2] * (l[2] - big_l)) / sum).epsilon(1e-12));
    CHECK(g[0][1].item<double>() == Approx(c[1] * (l[1] - big_l) / sum).epsilon(1e-12));
    CHECK(p.classifier->metrics().at("weight_peak") == Approx(std::exp(d[0]) / (sum / 3)));
    auto q = pair_with(terms_with({a[0], a[1]}, {b[0], b[1]}, {d[0], d[1]}), false);
    CHECK(q.classifier->training_step(mlo_test::three_samples()).item<double>() ==
          Approx(weighted / 3).epsilon(1e-14));
  }
  // Predictions use the plain logits.
  auto p = pair_with(terms_with({a[0], a[1]}, {b[0], b[1]}, {}));
  CHECK(torch::equal(p.classifier->logits(mlo_test::three_samples().data),
                     mlo_test::three_samples().data));
}

TEST_CASE("Learned loss: it starts as logit adjustment with tau = init_tau",
          "[problems][reweighting]") {
  const std::vector<int64_t> counts{30, 10};
  rw::LogitTerms terms(counts, 1.5, false);
  // (the terms are float32 parameters, like a model's)
  CHECK(torch::equal(terms->shift, (rw::log_class_prior(counts) * 1.5).to(at::kFloat)));
  CHECK(torch::equal(terms->log_scale, torch::zeros({2})));
  terms->to(torch::kDouble);
  auto learned = pair_with(terms);
  rw::Classifier adjusted("classifier", mlo::ProblemConfig(),
                          rw::LogitAdjustmentOptions(rw::log_class_prior(counts)).tau(1.5));
  adjusted.module(mlo_test::identity_chain());
  const auto batch = mlo_test::three_samples();
  // (equal up to the float32 rounding of the starting shift)
  CHECK(learned.classifier->training_step(batch).item<double>() ==
        Approx(adjusted.training_step(batch).item<double>()).epsilon(1e-7));
  CHECK_THROWS_WITH(rw::LogitTerms(counts, -1.0, false), Contains("init_tau must be finite"));
  CHECK_THROWS_WITH(rw::LogitTerms(std::vector<int64_t>{4, 0}, 1.0, false),
                    Contains("every class needs a training sample"));
  CHECK_THROWS_WITH(rw::Classifier("c", mlo::ProblemConfig(), rw::LearnedLossOptions(nullptr)),
                    Contains("LearnedLossOptions needs a reweighter, got null"));
}

namespace {

// A linear classifier of 4 features and 3 classes (15 parameters) under learned logit terms
// (with class weights), in float64, after one step; `method` is the classifier's.
struct SmallProblem {
  mlo::Batch train, meta;
  mlo::nn::Chain chain;
  rw::LogitTerms terms{nullptr};
  std::shared_ptr<rw::Classifier> classifier;
  std::shared_ptr<rw::Reweighter> reweighter;
  std::unique_ptr<mlo::Engine> engine;

  // `scale`: the multiplicative terms start away from 1 (else at 1, where the training loss is
  // invariant to adding one vector to every class's weights, as the meta loss is).
  explicit SmallProblem(mlo::ProblemConfig config, bool scale = true)
      : train(torch::randn({24, 4}, torch::kDouble), torch::randint(3, {24})),
        meta(torch::randn({9, 4}, torch::kDouble), torch::randint(3, {9})) {
    chain->push_back("fc", torch::nn::Linear(4, 3));
    chain->to(torch::kDouble);
    terms = rw::LogitTerms(std::vector<int64_t>{40, 10, 2}, 1.0, true);
    terms->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;  // away from the symmetric start
      if (scale) terms->log_scale.copy_(torch::tensor({0.3, -0.2, 0.1}, torch::kDouble));
      terms->log_weight.copy_(torch::tensor({-0.4, 0.1, 0.5}, torch::kDouble));
    }
    classifier = std::make_shared<rw::Classifier>("classifier", std::move(config));
    classifier->module(chain)
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
        .data(std::vector<mlo::Batch>{train});
    reweighter = std::make_shared<rw::Reweighter>("reweighter");
    reweighter->module(terms)
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
        .data(std::vector<mlo::Batch>{meta});
    classifier->weighting(rw::LearnedLossOptions(reweighter.get()));
    engine = std::make_unique<mlo::Engine>(mlo::EngineConfig().train_iters(1));
    engine->add(reweighter).add(classifier).link(reweighter, classifier);
    engine->run();
  }

  // The training loss at the classifier's current parameters, with a graph.
  at::Tensor train_loss() {
    const auto losses = torch::cross_entropy_loss(terms->forward(chain->forward(train.data)),
                                                  train.target, {}, at::Reduction::None);
    const auto c = terms->weights(train.target);
    return (c * losses).sum() / c.sum();
  }

  // -d/dlambda (dL/dw . x) for the classifier's gradient contracted with x.
  std::vector<at::Tensor> mixed(const std::vector<at::Tensor>& x) {
    const auto w = classifier->parameters();
    const auto g = torch::autograd::grad({train_loss()}, w, {}, true, true);
    at::Tensor gx = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < g.size(); ++i) gx = gx + (g[i] * x[i]).sum();
    const auto lambda = reweighter->parameters();
    auto out = torch::autograd::grad({gx}, lambda, {}, false, false, true);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = out[i].defined() ? -out[i] : torch::zeros_like(lambda[i]);
    }
    return out;
  }

  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v) {
    auto method = classifier->config().method().make();
    return method->apply(v, engine->level(*classifier), engine->level(*reweighter));
  }
};

}  // namespace

TEST_CASE("Learned loss: DARTS's hypergradient is the exact mixed product",
          "[problems][reweighting][hypergrad]") {
  torch::manual_seed(4);
  SmallProblem p(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4)));
  CHECK(p.reweighter->metrics().count("shift/2") == 1);
  CHECK(p.reweighter->metrics().count("cweight/0") == 1);
  std::vector<at::Tensor> v;
  for (const auto& t : p.classifier->parameters()) v.push_back(torch::randn_like(t));
  const auto got = p.apply(v);
  const auto want = p.mixed(v);
  const double error = relative_error(got, want);
  INFO("relative error " << error);
  CHECK(error < 1e-7);  // a central difference of step 1e-4 |v|: O(eps^2)
}

TEST_CASE("Learned loss: DARTS jvp takes the exact mixed product forward-over-reverse",
          "[problems][reweighting][hypergrad]") {
  // (the logit terms act inside the cross-entropy: not separable, and the product passes
  // through the cross-entropy's backward)
  torch::manual_seed(4);
  SmallProblem p(mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::DartsMode::kJvp)));
  std::vector<at::Tensor> v;
  for (const auto& t : p.classifier->parameters()) v.push_back(torch::randn_like(t));
  const double error = relative_error(p.apply(v), p.mixed(v));
  INFO("relative error " << error);
  CHECK(error < 1e-10);
}

TEST_CASE("Learned loss: CG's hypergradient is -d/dlambda (dL/dw . H^+ v), H solved exactly",
          "[problems][reweighting][hypergrad]") {
  torch::manual_seed(5);
  // With unit scales the Hessian is singular along the invariance (5 directions) and v, a
  // gradient of the plain logits' loss, is orthogonal to them: CG from 0 converges to the
  // least-norm solution H^+ v.
  SmallProblem p(mlo::ProblemConfig().method(mlo::CGOptions().iterations(30)), /*scale=*/false);
  // The meta gradient at the stepped parameters, as the method is given it.
  const auto w = p.classifier->parameters();
  const auto meta_loss = torch::cross_entropy_loss(p.chain->forward(p.meta.data), p.meta.target);
  const auto v = torch::autograd::grad({meta_loss}, w);
  // The Hessian of the training loss in w, 15 x 15, row by row.
  const auto g = torch::autograd::grad({p.train_loss()}, w, {}, true, true);
  const auto flat_g = torch::cat({g[0].flatten(), g[1].flatten()});
  const int64_t n = flat_g.numel();
  REQUIRE(n == 15);
  auto hessian = torch::zeros({n, n}, torch::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    const auto row = torch::autograd::grad({flat_g[i]}, w, {}, true, false);
    hessian[i] = torch::cat({row[0].flatten(), row[1].flatten()});
  }
  const auto flat_v = torch::cat({v[0].flatten(), v[1].flatten()}).unsqueeze(1);
  const auto x = torch::linalg_pinv(hessian, 1e-10, /*hermitian=*/true).matmul(flat_v).squeeze(1);
  CHECK(torch::allclose(hessian.matmul(x), flat_v.squeeze(1), 1e-9, 1e-11));
  const auto want = p.mixed({x.slice(0, 0, 12).view({3, 4}), x.slice(0, 12, 15)});
  const auto got = p.apply({v[0], v[1]});
  const double error = relative_error(got, want);
  INFO("relative error " << error);
  CHECK(error < 1e-8);
}

TEST_CASE("Experiment: learned_loss from YAML; no model for its upper problem",
          "[problems][reweighting][run]") {
  std::string yaml = mlo_test::kTinyReweighting;
  const std::string model_line = "    model: {name: mwn, hidden: 4}\n";
  const std::string without_model = yaml.replace(yaml.find(model_line), model_line.size(), "");
  const auto config = mlo::run::parse_run_config(
      without_model, "ll.yaml",
      {"reweighting.method=learned_loss", "reweighting.learned_loss.init_tau=0.5"});
  auto experiment = mlo::run::make_experiment(config);
  auto& ex = dynamic_cast<rw::ReweightingExperiment&>(*experiment);
  std::shared_ptr<rw::Reweighter> reweighter;
  for (const auto& problem : ex.engine().problems()) {
    if (auto r = std::dynamic_pointer_cast<rw::Reweighter>(problem)) reweighter = r;
  }
  REQUIRE(reweighter);
  auto* terms = reweighter->logit_terms();
  REQUIRE(terms != nullptr);
  CHECK_FALSE(terms->has_class_weights());
  CHECK(torch::allclose(terms->shift, (rw::log_class_prior(ex.train_counts()) * 0.5).to(at::kFloat)));
  const auto before = terms->shift.clone();
  ex.engine().run();
  CHECK_FALSE(torch::equal(before, terms->shift));  // learned
  CHECK_THAT(ex.describe(), Contains("learned loss (per-class logit terms, starting at tau 0.5)"));
  CHECK(ex.model_name("reweighter") == "learned_loss");
  // Validation: no weight net, so no per-class weights.
  const auto valid = ex.evaluate(mlo::run::EvalSet::kValid);
  CHECK(valid.count("valid/balanced_acc") == 1);
  for (const auto& [key, value] : valid) CHECK(key.rfind("valid/weight/", 0) != 0);
  // The resolved config has no reweighter model and reads back to itself.
  const std::string text = mlo::run::to_yaml(config);
  CHECK(text.find("hidden") == std::string::npos);
  CHECK(mlo::run::to_yaml(mlo::run::parse_run_config(text, "resolved.yaml")) == text);
  // Its upper problem has no model to set.
  CHECK_THROWS_WITH(
      mlo::run::parse_run_config(mlo_test::kTinyReweighting, "ll.yaml",
                                 {"reweighting.method=learned_loss"}),
      Contains("problems.reweighter.model"));
  CHECK_THROWS_WITH(mlo::run::parse_run_config(without_model, "ll.yaml",
                                               {"reweighting.method=learned_loss",
                                                "reweighting.learned_loss.init_tau=-2"}),
                    mlo_test::Names({"reweighting.learned_loss.init_tau:", ">= 0"}));
}

TEST_CASE("Experiment: data.label_noise changes the training labels only, as seeded",
          "[problems][reweighting][run][data]") {
  auto build = [](const std::vector<std::string>& overrides) {
    auto config = mlo::run::parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides);
    return mlo::run::make_experiment(config);
  };
  auto as = [](mlo::run::Experiment& e) -> rw::ReweightingExperiment& {
    return dynamic_cast<rw::ReweightingExperiment&>(e);
  };
  const std::vector<std::string> noise{"data.imbalance=1", "data.label_noise.type=flip",
                                       "data.label_noise.ratio=0.4"};
  auto clean = build({"data.imbalance=1"});
  auto noisy = build(noise);
  auto again = build(noise);
  std::vector<std::string> reseeded = noise;
  reseeded.push_back("data.label_noise.seed=11");
  auto other_seed = build(reseeded);
  std::vector<std::string> run_seed = noise;  // the run's seed, 2, said explicitly
  run_seed.push_back("data.label_noise.seed=2");
  auto explicit_seed = build(run_seed);
  const auto& c = as(*clean);
  const auto& n = as(*noisy);
  CHECK(torch::equal(c.meta_targets(), n.meta_targets()));
  CHECK(torch::equal(c.valid_targets(), n.valid_targets()));
  CHECK(torch::equal(c.train_targets(), n.clean_train_targets()));
  // Flip: 40% of each class's training labels are now the next class's.
  const auto changed = n.train_targets().ne(n.clean_train_targets());
  int64_t want = 0;  // round(0.4 n_c) in each class
  for (const int64_t count : mlo::data::class_counts(n.clean_train_targets(), 10)) {
    want += std::llround(0.4 * static_cast<double>(count));
  }
  CHECK(want > 0);
  CHECK(changed.sum().item<int64_t>() == want);
  CHECK(torch::equal(n.train_targets().index({changed}),
                     (n.clean_train_targets().index({changed}) + 1).remainder(10)));
  CHECK(torch::equal(n.train_targets(), as(*again).train_targets()));
  CHECK(torch::equal(n.train_targets(), as(*explicit_seed).train_targets()));
  CHECK_FALSE(torch::equal(n.train_targets(), as(*other_seed).train_targets()));
  CHECK_THAT(n.describe(), Contains("label noise: flip 0.4 (seed 2): "));
  CHECK_THAT(n.describe(), Contains(std::to_string(want) + " of " +
                                    std::to_string(n.train_targets().numel()) +
                                    " training labels changed ("));
  // With the long tail (imbalance 10): the same long-tailed split, noise on top of it.
  auto tail = build({});
  auto noisy_tail = build({"data.label_noise.type=uniform", "data.label_noise.ratio=0.3"});
  const auto& t = as(*tail);
  const auto& nt = as(*noisy_tail);
  CHECK(torch::equal(t.train_targets(), nt.clean_train_targets()));
  CHECK(torch::equal(t.meta_targets(), nt.meta_targets()));
  CHECK(torch::equal(t.valid_targets(), nt.valid_targets()));
  int64_t want_tail = 0;
  for (const int64_t count : t.train_counts()) {
    want_tail += std::llround(0.3 * static_cast<double>(count));
  }
  CHECK(nt.train_targets().ne(nt.clean_train_targets()).sum().item<int64_t>() == want_tail);
  CHECK(nt.train_counts() == mlo::data::class_counts(nt.train_targets(), 10));
  CHECK(t.train_counts() != nt.train_counts());  // the given labels' counts
  // Refusals name the key.
  CHECK_THROWS_WITH(build({"data.label_noise.type=pairs"}),
                    Contains("data.label_noise.type"));
  CHECK_THROWS_WITH(build({"data.label_noise.type=flip", "data.label_noise.ratio=1.2"}),
                    Contains("data.label_noise.ratio"));
  CHECK_THROWS_WITH(build({"data.label_noise.ratio=0.2"}),
                    mlo_test::Names({"data.label_noise.ratio: is 0.2", "data.label_noise.type"}));
  CHECK_THROWS_WITH(build({"data.label_noise.seed=4"}),
                    mlo_test::Names({"data.label_noise.seed: is 4", "data.label_noise.type"}));
  // A long tail steeper than the data allows leaves a class empty.
  CHECK_THROWS_WITH(build({"data.imbalance=100"}),
                    mlo_test::Names({"data.imbalance:", "100", "'class"}));
  // Logit adjustment under the weights, without weights.
  const std::string yaml = mlo_test::kTinyReweighting;
  const std::string baseline = yaml.substr(0, yaml.find("  reweighter:"));
  CHECK_THROWS_WITH(mlo::run::parse_run_config(baseline, "tiny.yaml",
                                               {"reweighting.method=mwn",
                                                "reweighting.mwn.logit_adjustment=1"}),
                    mlo_test::Names({"reweighting.mwn.logit_adjustment:", "reweighter"}));
}

}  // namespace learned_loss_test
