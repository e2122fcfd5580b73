#pragma once
/// \file
/// The few-shot experiment (`experiment: fewshot`): implicit MAML (or first-order MAML) on
/// sinusoid regression or N-way K-shot image classification, with the two baselines of the
/// literature. Problems "inner" (`Learner`: adapts to one task's support set per unroll,
/// restarted from theta) and "outer" (`MetaLearner`: theta, judged on the task's query set); a
/// `TaskEnvironment` draws one task per unroll of the inner problem and both read it. Several
/// tasks per meta-batch: `problems.outer.gradient_accumulation`.
///
///   mlo run configs/fewshot_sinusoid.yaml                                    # iMAML, CG
///   mlo run configs/fewshot_fmnist.yaml --set fewshot.reg=0
///           --set problems.inner.method=first_order                          # first-order MAML
///
/// Evaluation adapts theta to `fewshot.eval_tasks` tasks (the same tasks at every validation)
/// with the inner objective and optimizer for `fewshot.adapt_steps` steps and reports the query
/// loss ("loss"; "mse" for regression) and accuracy ("acc"). Validation tasks and test tasks
/// are drawn apart: for images, validation from the training split's images of the test
/// classes, test from the test split's; meta-training sees only the training classes. Beside
/// them: "scratch_*" (a fresh model trained on the support set alone) and "finetune_*" (a model
/// pre-trained on all the training classes, or on one fresh training-distribution task's
/// points per step, then fine-tuned on the support set, for classes with a new head), each for
/// `fewshot.baseline_steps` steps.

#include "problems/fewshot/learner.h"
#include "problems/fewshot/task_environment.h"
#include "problems/fewshot/tasks.h"

#include <mlo/base/fields.h>
#include <mlo/run/experiment.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace fewshot {

/// `fewshot:` the tasks, the proximal term, evaluation and the baselines.
struct FewshotConfig {
  /// "sinusoid" or "classes" (N-way K-shot from `data.dataset`).
  std::string tasks = "sinusoid";
  int64_t ways = 5;     ///< classes: N
  int64_t shots = 5;    ///< K: support points per task (sinusoid) or per class
  int64_t queries = 10; ///< query points per task (sinusoid) or per class
  std::vector<int64_t> train_classes{0, 1, 2, 3, 4};  ///< classes: meta-training's
  std::vector<int64_t> test_classes{5, 6, 7, 8, 9};   ///< classes: validation's and test's
  double reg = 1.0;       ///< the proximal term's weight (0: none, first-order MAML)
  int64_t hidden = 40;    ///< sinusoid: MLP width
  int64_t channels = 32;  ///< classes: convolution channels
  int64_t eval_tasks = 100;
  int64_t adapt_steps = 0;     ///< evaluation's inner steps; 0: the inner problem's unroll
  int64_t baseline_steps = 0;  ///< the baselines' steps; 0: adapt_steps
  int64_t pretrain_steps = 1000;  ///< the fine-tuning baseline's pre-training (Adam)
  double pretrain_lr = 1e-3;
  int64_t pretrain_batch = 64;  ///< classes: images per pre-training step
};

/// `data:` where the images come from (tasks: classes).
struct FewshotDataConfig {
  std::string dataset = "fashion_mnist";
  std::string root;       ///< "" : the dataset's default folder
  bool download = false;  ///< fetch missing files
};

class FewshotExperiment : public run::Experiment {
 public:
  /// Its name in YAML: `experiment: fewshot`.
  static constexpr const char* kName = "fewshot";
  struct Settings : run::SettingsFor<Settings> {
    FewshotConfig fewshot;
    FewshotDataConfig data;
    void visit(Fields& fields) override;
    /// outer above inner.
    run::DependencyConfig default_dependencies(const run::RunConfig& config) const override;
    std::vector<std::string> required_problems() const override { return {"inner", "outer"}; }
    /// Disjoint class lists with at least `ways` classes each; the inner problem without
    /// warmup or roll-back (a task per unroll).
    void check(const run::RunConfig& config) const override;
  };

  /// Loads the data, builds the task samplers, pre-trains the fine-tuning baseline, and builds
  /// the pair, the environment and the engine.
  explicit FewshotExperiment(const run::RunConfig& config);

  Engine& engine() override { return *engine_; }
  /// After adaptation, on the validation or the test tasks: "loss" (and "mse" for regression,
  /// "acc" for classification), with the baselines' "scratch_*" and "finetune_*".
  Metrics evaluate(run::EvalSet set) override;
  std::vector<std::string> metric_names() const override;
  std::string describe() const override;
  bool synthetic() const override { return synthetic_; }
  std::string report(const Metrics& test, const Metrics& valid) const override;

 private:
  // The tasks of `set` (drawn once, the same at every evaluation).
  const std::vector<Task>& eval_tasks(run::EvalSet set);
  // Pre-trains the fine-tuning baseline's model.
  void pretrain();

  run::RunConfig config_;
  Settings settings_;
  bool regression_ = true;
  bool synthetic_ = false;
  std::string data_description_;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::vector<int64_t> image_shape_;
  std::shared_ptr<TaskSampler> train_tasks_, valid_tasks_, test_tasks_;
  at::Tensor pretrain_images_, pretrain_labels_;  // classes: the training classes' images
  std::map<run::EvalSet, std::vector<Task>> eval_tasks_;
  std::map<run::EvalSet, Metrics> baselines_;  // they do not depend on theta: computed once
  torch::nn::Sequential pretrained_{nullptr};
  std::shared_ptr<Learner> inner_;
  std::shared_ptr<MetaLearner> outer_;
  std::shared_ptr<TaskEnvironment> environment_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
