#pragma once
/// \file
/// The data-reweighting experiment (`experiment: reweighting`): a classifier on a long-tailed
/// training set and, when configured, a reweighter (Meta-Weight-Net) trained on a balanced meta
/// set (problems/reweighting/reweighting.h). Its own YAML keys: the `data:` and `reweighting:`
/// sections and each problem's `model:` (docs/config-reference.md).

#include "problems/reweighting/reweighting.h"
#include "problems/reweighting/scheme.h"

#include <mlo/data/stream.h>
#include <mlo/data/transforms.h>
#include <mlo/nn/registry.h>
#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/base/fields.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {


/// The class names of `dataset` by label, as reports print them ("synthetic": "class0" ...
/// "class9"). Metric names hold them through `metric_segment` ("valid/acc/ankle_boot").
std::vector<std::string> dataset_class_names(const std::string& dataset);

/// The image transform of `dataset` (augmentation only when `train`).
data::TransformOptions transform_options(const std::string& dataset, bool train);

/// `model:` a network by name and its size options.
/// `problems.<p>.model:` a registered model by name, with its own keys (mlo/nn/registry.h).
using ModelConfig = nn::ModelConfig;

/// `data.label_noise:` corruption of the training labels (mlo/data/label_noise.h), applied
/// after the meta and validation sets are held out, so that they (and the test set) stay clean.
struct LabelNoiseConfig {
  std::string type = "none";  ///< none, uniform (any other class) or flip (the next class)
  double ratio = 0.0;         ///< the fraction of each class's training labels made wrong
  int64_t seed = -1;          ///< seeds the corruption; -1: the run's seed
};

/// `data:` dataset, long-tailed split, label noise, batches, augmentation.
struct DataConfig {
  std::string dataset = "fashion_mnist";  ///< a registered dataset (mlo/data/registry.h)
  std::string root;                       ///< folder of the files ("" = dataset default)
  double imbalance = 100.0;               ///< rho: largest class / smallest class
  int64_t meta_size = 100;                ///< balanced meta set (meta_size / classes per class)
  /// Balanced validation set (valid_size / classes per class), held out of the training data
  /// before the long-tailed split, disjoint from train and meta. Validation and early stopping
  /// use it; the test set is evaluated only once, at the end.
  int64_t valid_size = 1000;
  /// Shuffle which class gets which training count (false: class 0 is the largest, the last
  /// class the rarest, the conventional long-tailed split).
  bool shuffle_classes = true;
  /// Noisy training labels (none by default).
  LabelNoiseConfig label_noise;
  int64_t batch_size = 100;
  int64_t meta_batch_size = 100;  ///< 0: the same as batch_size
  /// Evaluation batch (validation and test); 0: the training batch, so that evaluating, with no
  /// graph, never needs more memory than a training step.
  int64_t test_batch_size = 0;
  bool augment = true;
  /// When the dataset's files are missing, fetch them from the dataset's official address into
  /// `root` (or the dataset's download folder), checking the published checksums
  /// (mlo/data/download.h).
  bool download = false;
  /// When the dataset's files are missing and `download` is off, use synthetic data instead
  /// (loudly) rather than fail.
  bool synthetic_fallback = false;
  int64_t synthetic_size = 5000;      ///< synthetic: training images per class
  int64_t synthetic_test_size = 200;  ///< synthetic: test images per class
};

/// `reweighting:` the classifier's weighting scheme (`method`, a registered scheme:
/// problems/reweighting/scheme.h; built in: mwn, class_mwn, l2rw, class_balanced,
/// logit_adjusted, learned_loss, focal) and that scheme's own keys.
using ReweightingConfig = SchemeConfig;

/// The experiment. Problems: "classifier" (required) and "reweighter" (optional: without it,
/// the baseline, plain training on the long-tailed set).
class ReweightingExperiment : public run::Experiment, public run::MemoryTarget {
 public:
  /// Its name in YAML: `experiment: reweighting`.
  static constexpr const char* kName = "reweighting";
  /// Every dataset has this many classes.
  static constexpr int64_t kClasses = 10;

  /// The experiment's own YAML keys and rules.
  struct Settings : run::SettingsFor<Settings> {
    DataConfig data;
    ReweightingConfig reweighting;
    /// `problems.<name>.model`, by problem name.
    std::map<std::string, ModelConfig> models;

    /// The model of `problem` (the default one if it has none).
    ModelConfig model(const std::string& problem) const;

    void visit(Fields& fields) override;
    void visit_problem(const std::string& problem, Fields& fields) override;
    /// Early stopping watches "valid/balanced_acc" (max) unless the YAML says otherwise.
    void defaults(run::RunConfig& config) const override;
    /// The reweighter above the classifier, when there is a reweighter.
    run::DependencyConfig default_dependencies(const run::RunConfig& config) const override;
    /// Problems named classifier (required) and reweighter; models that fit each; meta and
    /// validation sizes multiples of the class count; a validation set when validating or
    /// early stopping; an early-stopping metric the experiment reports.
    std::vector<std::string> required_problems() const override { return {"classifier"}; }
    std::vector<std::string> optional_problems() const override { return {"reweighter"}; }
    void check(const run::RunConfig& config) const override;
    /// `data.batch_size` (the classifier's) and, with a weight net, the meta batch (the
    /// reweighter's).
    std::vector<GlobalBatch> global_batches(const run::RunConfig& config) const override;
  };

  /// Loads the data and builds everything; throws `mlo::Error` naming the key of a bad setting.
  explicit ReweightingExperiment(const run::RunConfig& config);

  Engine& engine() override { return *engine_; }
  /// Metrics of the classifier on `set`: "acc", "balanced_acc" (mean of per-class accuracies),
  /// "rare3_acc" (mean accuracy of the 3 classes with the fewest training images; not on a
  /// balanced training split, which has no rarest classes), "loss" and
  /// "acc/<class>" for every class; on the validation set prefixed "valid/", plus, with a
  /// weight net, "valid/weight/<class>": its mean weight of that class's validation samples.
  /// <class> is the class name through `metric_segment` ("ankle_boot", "t-shirt_top").
  Metrics evaluate(run::EvalSet set) override;
  /// "acc", "balanced_acc", "rare3_acc" (the 3 classes with the fewest training images by
  /// their true labels, so label noise does not change which they are).
  std::vector<std::string> metric_names() const override {
    return {"acc", "balanced_acc", "rare3_acc"};
  }
  /// "data.valid_size is 0" when there is no validation split.
  std::optional<std::string> missing_validation() const override;
  std::string describe() const override;
  bool synthetic() const override { return synthetic_; }
  /// The per-class test accuracy table, with training counts.
  std::string report(const Metrics& test, const Metrics& valid) const override;

  // ---- For the memory tools (run::MemoryTarget). ----
  /// "classifier".
  std::string main_problem() const override { return "classifier"; }
  /// A training batch of the classifier, or a meta batch of the reweighter.
  Batch sample_batch(const std::string& name) override;
  /// The registered name of `problems.<name>.model` ("resnet32").
  std::string model_name(const std::string& name) const override;
  /// `data.batch_size` (the classifier), `data.meta_batch_size` (the reweighter) and the
  /// model's `efficient_activation`.
  run::MemoryKeys memory_keys() const override {
    return {"data.batch_size",
            {{"reweighter", "data.meta_batch_size"}},
            {"model.efficient_activation=true"}};
  }

  /// Names of the classes, by label.
  const std::vector<std::string>& class_names() const { return class_names_; }
  /// Training samples per class after the long-tailed split, by their (possibly noisy) labels.
  const std::vector<int64_t>& train_counts() const { return train_counts_; }
  /// The training labels before `data.label_noise` (the labels in use when there is none).
  const at::Tensor& clean_train_targets() const { return clean_train_targets_; }
  /// The training labels in use.
  const at::Tensor& train_targets() const { return train_targets_; }
  /// The meta set's labels.
  const at::Tensor& meta_targets() const { return meta_targets_; }
  /// The validation set's labels.
  const at::Tensor& valid_targets() const { return valid_targets_; }
  /// Validation samples per class (balanced: data.valid_size / classes each).
  std::vector<int64_t> valid_counts() const;

 private:
  void load_data();
  void build_problems();

  run::RunConfig config_;
  Settings settings_;
  std::vector<std::string> class_names_;
  std::vector<int64_t> train_counts_;
  std::vector<int64_t> split_counts_;  // by the true labels: which classes are rare (rare3_acc)
  bool has_rare_classes_ = true;        // the split is long-tailed: rare3_acc is reported
  bool synthetic_ = false;
  std::string dataset_;       // the dataset in use ("synthetic" after a fallback)
  std::string dataset_name_;  // for logs
  std::string noise_line_;  // what data.label_noise did and its confusion matrix, for describe()
  at::Tensor clean_train_targets_;
  at::Tensor train_images_, train_targets_, meta_images_, meta_targets_, valid_images_,
      valid_targets_, test_images_, test_targets_;
  std::shared_ptr<Classifier> classifier_;
  std::shared_ptr<Reweighter> reweighter_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<BatchStream> train_stream_;
  std::shared_ptr<BatchStream> meta_stream_;
};

/// `ReweightingExperiment::kClasses`, for the experiment's own files.
inline constexpr int64_t kClasses = ReweightingExperiment::kClasses;

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
