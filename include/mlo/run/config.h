#pragma once
/// \file
/// The configuration of an experiment launched by `mlo run`: plain structs with defaults, read
/// from and written to YAML by `mlo/io/yaml.h`. Names and values mirror the YAML keys
/// (docs/config-reference.md lists every key).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlo {
namespace run {

/// The valid values of the string-named settings below, one list each: the YAML validation
/// (io/) and the builders (run/) both read them, so a name is either known or an error listing
/// these.
inline const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"cnn", "resnet32", "resnet50", "mwn"};
  return names;
}
inline const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names{"sgd", "adam", "adamw"};
  return names;
}
inline const std::vector<std::string>& scheduler_names() {
  static const std::vector<std::string> names{"none", "multistep", "cosine"};
  return names;
}
inline const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names{"fashion_mnist", "cifar10", "synthetic"};
  return names;
}

/// `model:` a network by name and its size options.
struct ModelConfig {
  std::string name = "cnn";  ///< cnn | resnet32 | resnet50 | mwn
  int64_t hidden = 100;      ///< mwn: hidden width
};

/// `optimizer:` sgd | adam | adamw and their options.
struct OptimizerConfig {
  std::string name = "sgd";
  double lr = 0.1;
  double momentum = 0.0;  ///< sgd
  double weight_decay = 0.0;
  bool nesterov = false;  ///< sgd
  double beta1 = 0.9;     ///< adam, adamw
  double beta2 = 0.999;   ///< adam, adamw
  double eps = 1e-8;      ///< adam, adamw
};

/// `scheduler:` none | multistep | cosine, counted in optimizer steps.
struct SchedulerConfig {
  std::string name = "none";
  std::vector<int64_t> milestones;  ///< multistep
  double gamma = 0.1;               ///< multistep
  int64_t t_max = 0;                ///< cosine: period in optimizer steps (0: the run's length)
  double eta_min = 0.0;             ///< cosine: final learning rate, as a fraction of the base
};

/// `checkpointing:` activation checkpointing of the problem's model.
struct CheckpointConfig {
  std::string strategy = "none";  ///< none | uniform | sqrt | optimal | min_memory
  int64_t segments = 4;           ///< uniform
  int64_t budget_bytes = 0;       ///< optimal (0: use budget_fraction)
  double budget_fraction = 0.5;   ///< optimal: of the no-checkpoint peak
  double max_overhead = 0.3;      ///< min_memory: time overhead cap
};

/// One problem (level) of the experiment.
struct ProblemSettings {
  ModelConfig model;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  int64_t unroll_steps = 1;
  int64_t warmup_steps = 0;
  bool roll_back = false;
  double gradient_clipping = 0.0;
  int64_t gradient_accumulation = 1;
  std::string precision = "fp32";  ///< fp32 | bf16 | fp16
  CheckpointConfig checkpointing;
  std::string method = "darts";    ///< darts | neumann | cg
  double darts_alpha = 0.01;       ///< YAML: darts: {alpha}
  int64_t neumann_iterations = 1;  ///< YAML: neumann: {iterations, alpha}
  double neumann_alpha = 1.0;
  int64_t cg_iterations = 1;  ///< YAML: cg: {iterations, alpha}
  double cg_alpha = 1.0;
  int64_t log_step = 0;
};

/// `data:` dataset, long-tailed split, batches, augmentation.
struct DataConfig {
  std::string dataset = "fashion_mnist";  ///< fashion_mnist | cifar10 | synthetic
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
  int64_t batch_size = 100;
  int64_t meta_batch_size = 100;
  int64_t test_batch_size = 1000;
  bool augment = true;
  /// When the dataset's files are missing, use synthetic data instead (loudly) rather than fail.
  bool synthetic_fallback = false;
  int64_t synthetic_size = 5000;      ///< synthetic: training images per class
  int64_t synthetic_test_size = 200;  ///< synthetic: test images per class
};

/// `early_stopping:` (optional).
struct EarlyStoppingConfig {
  bool enabled = false;
  /// A validation metric ("valid/<name>", see Experiment::evaluate).
  std::string metric = "valid/balanced_acc";
  std::string mode = "max";  ///< min | max
  int64_t tolerance = 5;
  double min_delta = 0.0;
};

/// `engine:` the schedule of the whole run.
struct EngineSettings {
  int64_t train_iters = 3000;
  int64_t valid_step = 500;
  int64_t log_step = 100;
  int64_t save_step = 500;  ///< resumable state every N global steps (and at the end)
  bool track_memory = false;
  EarlyStoppingConfig early_stopping;
};

/// `dependencies:` the graph, by problem name (defaults follow the experiment).
struct DependencyConfig {
  std::map<std::string, std::vector<std::string>> u2l;
  std::map<std::string, std::vector<std::string>> l2u;
};

/// `reweighting:` settings of the data-reweighting experiment.
struct ReweightingConfig {
  /// Classifier loss sum_i w_i l_i / sum_i w_i (true) or mean_i w_i l_i (false).
  bool normalize_weights = true;
};

/// A whole experiment.
struct RunConfig {
  std::string experiment = "reweighting";  ///< reweighting
  std::string name = "experiment";         ///< used in logs and as the default output folder
  int64_t seed = 0;
  int64_t threads = 0;  ///< intra-op threads (0: LibTorch's default)
  EngineSettings engine;
  DataConfig data;
  /// By name; the reweighting experiment has "classifier" and, optionally, "reweighter".
  std::map<std::string, ProblemSettings> problems;
  DependencyConfig dependencies;
  ReweightingConfig reweighting;
  /// Where the YAML came from (for messages); not a YAML key.
  std::string source;
};

/// The dependency graph `config` runs with: `config.dependencies` when it names any edge, else
/// the experiment's default (reweighting: reweighter above classifier, when a reweighter exists).
DependencyConfig resolved_dependencies(const RunConfig& config);

/// The problems above `name` in `graph` (its `l2u` targets): the problems its unroll feeds.
std::vector<std::string> parents_of(const DependencyConfig& graph, const std::string& name);

/// The settings of a problem that act only when it is a lower problem (it has a parent):
/// `unroll_steps`, `warmup_steps`, `roll_back`, `method` and the method options. Returns the
/// key (relative to the problem, e.g. "unroll_steps", "neumann.iterations") of the first one set
/// to a value other than its default, or "" when all keep their defaults.
std::string lower_only_setting(const ProblemSettings& settings);

}  // namespace run
}  // namespace mlo
