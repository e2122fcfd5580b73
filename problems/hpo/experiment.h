#pragma once
/// \file
/// The hyperparameter-optimization experiment (`experiment: hpo`): L2-regularized logistic
/// regression with one weight per feature, learned on validation data
/// (problems/hpo/logreg.h). Problems "inner" (the classifier, restarted from zero at every
/// unroll) and "outer" (the L2 weights). Beside the learned weights it trains the same pair with
/// the weights frozen at `hpo.initial_weight` (the no-meta-learning baseline), step for step
/// with the run (an engine of its own, stepped by a callback of the experiment's engine: it
/// shows in the run's progress, stops and resumes with it), so every report compares the two:
///
///   mlo run configs/hpo_logreg.yaml --set problems.inner.method=cg
///
/// Its own YAML keys: `data:` (synthetic data) and `hpo:` (docs/config-reference.md).

#include "problems/hpo/logreg.h"

#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/base/fields.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace hpo {

/// `data:` the synthetic logistic-regression data (`make_logreg_data`).
struct HpoDataConfig {
  int64_t samples = 1000;      ///< split half training (inner), half validation (outer)
  int64_t test_samples = 1000; ///< held-out test points (the final report)
  int64_t features = 20;
  double noise = 0.1;  ///< label noise: y = [x w_true + noise * eps > 0]
};

/// The most floats the experiment's data may hold (train, validation and test together):
/// 2^28, 1 GiB; larger sizes are configuration mistakes, refused before anything is allocated.
inline constexpr int64_t kMaxDataElements = int64_t{1} << 28;

/// `hpo:` the L2 weights.
struct HpoConfig {
  /// Every weight's starting value, and the frozen baseline's value throughout.
  double initial_weight = 1.0;
};

class FrozenBaseline;

/// The experiment.
class HpoExperiment : public run::Experiment, public run::MemoryTarget {
 public:
  /// Its name in YAML: `experiment: hpo`.
  static constexpr const char* kName = "hpo";
  /// The experiment's own YAML keys and rules.
  struct Settings : run::SettingsFor<Settings> {
    HpoDataConfig data;
    HpoConfig hpo;

    void visit(Fields& fields) override;
    /// outer above inner.
    run::DependencyConfig default_dependencies(const run::RunConfig& config) const override;
    /// Exactly the problems "inner" and "outer".
    std::vector<std::string> required_problems() const override { return {"inner", "outer"}; }
    /// The data's size: at most kMaxDataElements floats in all.
    void check(const run::RunConfig& config) const override;
    /// Each half of `data.samples`: the inner problem's batch, then the outer's.
    std::vector<GlobalBatch> global_batches(const run::RunConfig& config) const override;
  };

  /// Makes the data, builds the pair and the engine, and the frozen baseline (the same pair and
  /// schedule with the weights' learning rate at 0), which trains as the engine runs.
  explicit HpoExperiment(const run::RunConfig& config);
  ~HpoExperiment() override;

  Engine& engine() override { return *engine_; }
  /// On the validation half (the outer problem's data; prefix "valid/") or the test set:
  /// "loss" and "acc" of the inner model with the learned weights, "frozen_loss" and
  /// "frozen_acc" with the weights frozen (the baseline at the engine's global step).
  Metrics evaluate(run::EvalSet set) override;
  /// "loss", "frozen_loss", "acc", "frozen_acc".
  std::vector<std::string> metric_names() const override {
    return {"loss", "frozen_loss", "acc", "frozen_acc"};
  }
  std::string describe() const override;
  /// Validation and test losses, learned vs frozen weights.
  std::string report(const Metrics& test, const Metrics& valid) const override;

  // ---- For the memory tools (run::MemoryTarget). ----
  /// "inner".
  std::string main_problem() const override { return "inner"; }
  /// The training half (inner) or the validation half (outer).
  Batch sample_batch(const std::string& name) override;

  /// The learned L2 weights.
  at::Tensor weights() const { return learned_.outer->weights(); }

 private:
  run::RunConfig config_;
  Settings settings_;
  LogRegData data_;
  std::shared_ptr<FrozenBaseline> baseline_;
  LogRegHpo learned_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace hpo
}  // namespace problems
}  // namespace mlo
