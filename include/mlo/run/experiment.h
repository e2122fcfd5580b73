#pragma once
/// \file
/// Assembles an experiment from its configuration: data (with the long-tailed split), models,
/// optimizers, schedules, problems and the engine; and evaluates it on the validation set (during
/// training) or on the test set (once, at the end).

#include <mlo/core/engine.h>
#include <mlo/run/config.h>

#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {
class Classifier;
class Reweighter;
}  // namespace reweighting
}  // namespace problems

namespace run {

/// Which held-out images `Experiment::evaluate` uses.
enum class EvalSet {
  kValid,  ///< the balanced validation set held out of the training data (`data.valid_size`)
  kTest,   ///< the dataset's test split
};

/// The data-reweighting experiment (`experiment: reweighting`): a classifier on a long-tailed
/// training set and, when configured, a reweighter trained on the balanced meta set.
class Experiment {
 public:
  /// Loads the data and builds everything; throws `mlo::Error` naming the key of a bad setting.
  explicit Experiment(const RunConfig& config);
  ~Experiment();

  Engine& engine() { return *engine_; }
  const RunConfig& config() const { return config_; }
  /// Metrics of the classifier on `set`: "acc", "balanced_acc" (mean of per-class accuracies),
  /// "loss" and "acc/<class name>" for every class; on the validation set every name is prefixed
  /// "valid/" ("valid/balanced_acc"), so a number says which split it comes from. Validation and
  /// early stopping use kValid; the test set is for the final report only.
  Metrics evaluate(EvalSet set);
  /// Names of the classes, by label.
  const std::vector<std::string>& class_names() const { return class_names_; }
  /// Training samples per class after the long-tailed split.
  const std::vector<int64_t>& train_counts() const { return train_counts_; }
  /// Validation samples per class (balanced: data.valid_size / classes each).
  std::vector<int64_t> valid_counts() const;
  /// A few lines describing data (real or synthetic), split and models, for logs.
  std::string describe() const;
  /// Whether the data is synthetic (then every report says so).
  bool synthetic() const { return synthetic_; }
  /// The problem called `name` ("classifier" or "reweighter"); throws `mlo::Error` if absent.
  std::shared_ptr<Problem> problem(const std::string& name) const;
  /// A training batch of the classifier, as its stream gives them (e.g. to plan checkpointing);
  /// advances that stream.
  Batch sample_batch();

 private:
  void load_data();
  void build_problems();

  RunConfig config_;
  std::vector<std::string> class_names_;
  std::vector<int64_t> train_counts_;
  bool synthetic_ = false;
  std::string dataset_;       // the dataset in use ("synthetic" after a fallback)
  std::string dataset_name_;  // for logs
  at::Tensor train_images_, train_targets_, meta_images_, meta_targets_, valid_images_,
      valid_targets_, test_images_, test_targets_;
  std::shared_ptr<problems::reweighting::Classifier> classifier_;
  std::shared_ptr<problems::reweighting::Reweighter> reweighter_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<BatchStream> train_stream_;
};

}  // namespace run
}  // namespace mlo
