#include "problems/hpo/experiment.h"

#include <mlo/base/error.h>
#include <mlo/base/number_text.h>
#include <mlo/data/stream.h>
#include <mlo/run/device.h>
#include <mlo/run/builders.h>
#include <mlo/run/sharding.h>

#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <cstdio>
#include <sstream>

namespace mlo {
namespace problems {
namespace hpo {
namespace {

// Builds the pair from the configuration: the inner and outer problems' generic settings
// (optimizer, scheduler, method, ...), the data, and the initial weight. With `frozen` the
// weights' optimizer is SGD with learning rate 0, so they never move (the baseline), and each
// problem reads its whole (full) batch; else, under a distributed strategy, each data-parallel
// problem reads this rank's slice of it.
LogRegHpo build_pair(const run::RunConfig& config, const HpoExperiment::Settings& settings,
                     const LogRegData& data, bool frozen) {
  // The data is small: it sits on the run's device whole (no copy per step).
  const c10::Device device = run::resolve_device(config);
  const auto shard = [&](const Batch& batch, const std::string& name) {
    if (frozen) return batch.to(device);
    const data::Shard s = run::data_shard(config, name);
    return data::shard_batch(batch, s).to(device);
  };
  const int64_t features = data.train.data.size(1);
  LogRegHpo pair;
  pair.inner = std::make_shared<LogRegInner>(
      "inner", config.problems.at("inner").config);
  pair.outer = std::make_shared<LogRegOuter>(
      "outer", config.problems.at("outer").config);
  pair.inner->module(torch::nn::Linear(features, 1));
  run::setup_problem(*pair.inner, config);
  pair.inner->data(std::vector<Batch>{shard(data.train, "inner")});
  pair.outer->module(L2Weights(features, settings.hpo.initial_weight));
  if (frozen) {
    pair.outer->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0));
  } else {
    run::setup_problem(*pair.outer, config);
  }
  pair.outer->data(std::vector<Batch>{shard(data.valid, "outer")});
  return pair;
}

// Adds the pair to `engine` with the configuration's dependency graph.
void add_pair(Engine& engine, const LogRegHpo& pair, const run::RunConfig& config) {
  run::add_problems(engine, config, {pair.outer, pair.inner});
}

// (mean binary cross-entropy, accuracy) of the inner model on `on_host`, in chunks of at most
// `chunk` points (the training batch: evaluation never holds more than a training step).
std::pair<double, double> loss_and_accuracy(const LogRegInner& inner, const Batch& on_host,
                                            int64_t chunk) {
  torch::NoGradGuard no_grad;
  const int64_t n = on_host.size();
  double loss_sum = 0, correct = 0;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    const at::Tensor data = on_host.data.slice(0, begin, end).to(inner.device());
    const at::Tensor target = on_host.target.slice(0, begin, end).to(inner.device());
    const at::Tensor logits = inner.logits(data);
    loss_sum += torch::nn::functional::binary_cross_entropy_with_logits(
                    logits, target,
                    torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions().reduction(
                        torch::kSum))
                    .item<double>();
    correct += logits.gt(0).to(torch::kFloat).eq(target).to(torch::kDouble).sum().item<double>();
  }
  return {loss_sum / static_cast<double>(n), correct / static_cast<double>(n)};
}

}  // namespace

// The no-meta-learning baseline: the pair with its weights frozen, in an engine of its own that
// follows the run's global steps. As a callback of the experiment's engine it steps once per
// global step of the run (so it trains as part of the run: its progress, stops and resumes), its
// state is the callback's, and the evaluation first catches it up to the run's step.
class FrozenBaseline : public Callback {
 public:
  FrozenBaseline(LogRegHpo pair, const run::RunConfig& config)
      : pair_(std::move(pair)), engine_(plain(config.engine)) {
    add_pair(engine_, pair_, config);
    engine_.initialize();
  }
  StepDecision on_step_end(Engine& engine, const StepEnd& step) override {
    (void)engine;
    follow(step.step);
    return StepDecision::kContinue;
  }
  std::string state_name() const override { return "hpo_baseline"; }
  void save(torch::serialize::OutputArchive& archive) const override {
    engine_.state_dict(archive);
  }
  void load(torch::serialize::InputArchive& archive) override { engine_.load_state_dict(archive); }

  // Steps the baseline up to global step `step` (never back).
  void follow(int64_t step) {
    while (engine_.global_step() < step) engine_.step();
  }
  const LogRegInner& inner() const { return *pair_.inner; }

 private:
  // The run's schedule in one quiet process: no validation, logs, meter, early stopping or
  // ranks (every rank computes the same baseline on the full batches).
  static EngineConfig plain(EngineConfig config) {
    config.valid_step(0).log_step(0).track_memory(false).strategy(dist::Strategy::kDefault);
    config.early_stopping().enabled(false);
    return config;
  }

  LogRegHpo pair_;
  Engine engine_;
};

void HpoExperiment::Settings::visit(Fields& v) {
  v.section("data", [&](Fields& s) {
    s("samples", data.samples, at_least(2));
    s("test_samples", data.test_samples, at_least(1));
    s("features", data.features, at_least(1));
    s("noise", data.noise, non_negative());
  });
  v.section("hpo", [&](Fields& s) {
    s("initial_weight", hpo.initial_weight, [](const double& w) {
      return w >= LogRegOuter::kMinWeight
                 ? std::string()
                 : "must be >= " + number_text(LogRegOuter::kMinWeight) + " (the weights " +
                       "are kept positive), got " + number_text(w);
    });
  });
}

void HpoExperiment::Settings::check(const run::RunConfig& config) const {
  // (in doubles, so that no product of two sizes overflows before it is compared)
  const double floats = (static_cast<double>(data.samples) + data.test_samples) *
                        (static_cast<double>(data.features) + 1);
  if (floats > static_cast<double>(kMaxDataElements)) {
    config.fail("data.features",
                "data.samples + data.test_samples = " +
                    std::to_string(data.samples + data.test_samples) + " points of " +
                    std::to_string(data.features) + " features are " + number_text(floats) +
                    " floats, more than the experiment's limit of " +
                    std::to_string(kMaxDataElements) + " (1 GiB); choose smaller sizes");
  }
}

std::vector<run::ExperimentSettings::GlobalBatch> HpoExperiment::Settings::global_batches(
    const run::RunConfig& config) const {
  (void)config;
  // (each half of the points is one full batch: the inner problem's, then the outer's)
  const int64_t half = data.samples / 2;
  return {{"data.samples", half, "inner", 2}, {"data.samples", data.samples - half, "outer", 2}};
}

run::DependencyConfig HpoExperiment::Settings::default_dependencies(
    const run::RunConfig& config) const {
  (void)config;
  return run::DependencyConfig::bilevel("outer", "inner");
}

HpoExperiment::HpoExperiment(const run::RunConfig& config)
    : config_(config), settings_(config.settings_as<Settings>()) {
  if (config_.threads > 0) torch::set_num_threads(static_cast<int>(config_.threads));
  const HpoDataConfig& d = settings_.data;
  data_ = make_logreg_data(d.samples, d.features, d.noise, static_cast<uint64_t>(config_.seed),
                           d.test_samples);
  torch::manual_seed(static_cast<uint64_t>(config_.seed));

  // The baseline: the same schedule with the weights frozen, stepped with the run.
  // NOTE: in one process on every rank (strategy default, full batches): it is small, every
  // rank gets the same result, and it joins no process group. (Built before the learned pair,
  // so that each draws its initial values from the seeded generator as it always has.)
  baseline_ = std::make_shared<FrozenBaseline>(build_pair(config_, settings_, data_, true),
                                               config_);
  learned_ = build_pair(config_, settings_, data_, /*frozen=*/false);
  engine_ = std::make_unique<Engine>(config_.engine);
  add_pair(*engine_, learned_, config_);
  engine_->add_callback(baseline_);
}

HpoExperiment::~HpoExperiment() = default;

Metrics HpoExperiment::evaluate(run::EvalSet set) {
  const bool valid = set == run::EvalSet::kValid;
  const Batch& batch = valid ? data_.valid : data_.test;
  const std::string prefix = valid ? "valid/" : "";
  const int64_t chunk = std::max<int64_t>(1, data_.train.size());
  const auto [loss, acc] = loss_and_accuracy(*learned_.inner, batch, chunk);
  baseline_->follow(engine_->global_step());
  const auto [frozen_loss, frozen_acc] = loss_and_accuracy(baseline_->inner(), batch, chunk);
  return {{prefix + "loss", loss},
          {prefix + "acc", acc},
          {prefix + "frozen_loss", frozen_loss},
          {prefix + "frozen_acc", frozen_acc}};
}

std::string HpoExperiment::describe() const {
  const HpoDataConfig& d = settings_.data;
  std::ostringstream out;
  out << "data: synthetic logistic regression, " << d.features << " features, noise " << d.noise
      << "; training set of " << data_.train.size() << " (inner), validation set of "
      << data_.valid.size() << " (outer: the L2 weights learn on it), test set of "
      << data_.test.size() << " (final report only)\n";
  const ProblemConfig& inner = config_.problems.at("inner").config;
  out << "inner: logistic regression (hypergradient: " << inner.method().name()
      << ", unroll " << inner.unroll_steps()
      << "), outer: one L2 weight per feature from " << settings_.hpo.initial_weight
      << "; baseline: the same training with the weights frozen (step for step with the run)";
  return out.str();
}

Batch HpoExperiment::sample_batch(const std::string& name) {
  if (name == "outer") return data_.valid;
  MLO_CHECK(name == "inner", "the hpo experiment has no problem '", name,
            "' (its problems: inner, outer)");
  return data_.train;
}

std::string HpoExperiment::report(const Metrics& test, const Metrics& valid) const {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-22s %14s %14s\n", "", "learned L2", "frozen L2");
  out << "L2-regularized logistic regression: learned vs frozen weights\n" << line;
  const auto row = [&](const char* label, const Metrics& m, const std::string& prefix,
                       const std::string& name) {
    std::snprintf(line, sizeof(line), "%-22s %14.6f %14.6f\n", label, m.at(prefix + name),
                  m.at(prefix + "frozen_" + name));
    out << line;
  };
  row("validation loss", valid, "valid/", "loss");
  row("validation accuracy", valid, "valid/", "acc");
  row("test loss", test, "", "loss");
  row("test accuracy", test, "", "acc");
  return out.str();
}

}  // namespace hpo
}  // namespace problems

MLO_REGISTER_EXPERIMENT(problems::hpo::HpoExperiment);

}  // namespace mlo
