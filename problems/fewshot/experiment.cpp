#include "problems/fewshot/experiment.h"

#include "problems/fewshot/first_order.h"

#include <mlo/base/error.h>
#include <mlo/base/rng.h>
#include <mlo/data/registry.h>
#include <mlo/dist/strategy.h>
#include <mlo/run/builders.h>
#include <mlo/run/device.h>

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace mlo {
namespace problems {
namespace fewshot {
namespace {

// Seeds of the generators, apart from the run's seed so that no two draw the same numbers.
constexpr uint64_t kValidSeed = 1000003;
constexpr uint64_t kTestSeed = 2000003;
constexpr uint64_t kPretrainSeed = 3000003;
constexpr uint64_t kScratchSeed = 4000003;

at::Generator seeded(uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator();
  g.set_current_seed(seed);
  return g;
}

// The images of `classes` as floats in [0, 1], with their labels.
std::pair<at::Tensor, at::Tensor> of_classes(const at::Tensor& images, const at::Tensor& labels,
                                             const std::vector<int64_t>& classes) {
  at::Tensor keep = at::zeros_like(labels, at::kBool);
  for (const int64_t c : classes) keep = keep.logical_or(labels.eq(c));
  const at::Tensor index = keep.nonzero().squeeze(1);
  return {images.index_select(0, index).to(at::kFloat).div(255.0), labels.index_select(0, index)};
}

Task to_device(const Task& task, const c10::Device& device) {
  return {task.support.to(device), task.query.to(device)};
}

std::string list(const std::vector<int64_t>& values) {
  std::string out;
  for (const int64_t v : values) out += (out.empty() ? "" : " ") + std::to_string(v);
  return out;
}

}  // namespace

void FewshotExperiment::Settings::visit(Fields& v) {
  v.section("fewshot", [&](Fields& s) {
    s("tasks", fewshot.tasks, one_of({"sinusoid", "classes"}));
    s("ways", fewshot.ways, at_least(2));
    s("shots", fewshot.shots, int_in_range(1, 10000));
    s("queries", fewshot.queries, int_in_range(1, 10000));
    s("train_classes", fewshot.train_classes);
    s("test_classes", fewshot.test_classes);
    s("reg", fewshot.reg, non_negative());
    s("hidden", fewshot.hidden, int_in_range(1, 4096));
    s("channels", fewshot.channels, int_in_range(1, 1024));
    s("eval_tasks", fewshot.eval_tasks, at_least(1));
    s("adapt_steps", fewshot.adapt_steps, at_least(0));
    s("baseline_steps", fewshot.baseline_steps, at_least(0));
    s("pretrain_steps", fewshot.pretrain_steps, at_least(0));
    s("pretrain_lr", fewshot.pretrain_lr, positive());
    s("pretrain_batch", fewshot.pretrain_batch, int_in_range(1, 100000));
  });
  v.section("data", [&](Fields& s) {
    s("dataset", data.dataset, one_of(data::dataset_names()));
    s("root", data.root);
    s("download", data.download);
  });
}

run::DependencyConfig FewshotExperiment::Settings::default_dependencies(
    const run::RunConfig& config) const {
  (void)config;
  return run::DependencyConfig::bilevel("outer", "inner");
}

void FewshotExperiment::Settings::check(const run::RunConfig& config) const {
  const FewshotConfig& f = fewshot;
  if (f.tasks == "classes") {
    const auto check_list = [&](const char* key, const std::vector<int64_t>& classes) {
      if (static_cast<int64_t>(classes.size()) < f.ways) {
        config.fail(std::string("fewshot.") + key,
                    std::to_string(f.ways) + "-way tasks need at least " +
                        std::to_string(f.ways) + " classes, got [" + list(classes) + "]");
      }
      if (std::set<int64_t>(classes.begin(), classes.end()).size() != classes.size()) {
        config.fail(std::string("fewshot.") + key,
                    "a class is listed twice: [" + list(classes) + "]");
      }
      for (const int64_t c : classes) {
        if (c < 0) {
          config.fail(std::string("fewshot.") + key, "negative class " + std::to_string(c));
        }
      }
    };
    check_list("train_classes", f.train_classes);
    check_list("test_classes", f.test_classes);
    for (const int64_t c : f.test_classes) {
      if (std::find(f.train_classes.begin(), f.train_classes.end(), c) != f.train_classes.end()) {
        config.fail("fewshot.test_classes",
                    "class " + std::to_string(c) + " is also a training class; meta-test classes " +
                        "must be unseen in meta-training");
      }
    }
  }
  const ProblemConfig& inner = config.problems.at("inner").config;
  if (inner.warmup_steps() > 0) {
    config.fail("problems.inner.warmup_steps",
                "must be 0: every unroll of the inner problem adapts to one task, got " +
                    std::to_string(inner.warmup_steps()));
  }
  if (inner.roll_back()) {
    config.fail("problems.inner.roll_back",
                "must be false: the inner problem restarts from the meta-learner at every task");
  }
  const auto method = inner.method().make();
  if (method->differentiates_unroll()) {
    config.fail("problems.inner.method",
                "'" + inner.method().name() +
                    "' differentiates the inner steps from their start, which the learner " +
                    "resets to theta outside its graph, so MAML's path through phi <- theta " +
                    "would be missing; use cg, neumann, darts or sama (implicit MAML) or " +
                    "first_order (first-order MAML)");
  }
  if (f.reg == 0.0 && method->differentiates_loss()) {
    config.fail("fewshot.reg",
                "0 leaves theta out of the inner loss, so the method '" + inner.method().name() +
                    "' has nothing to differentiate; use reg > 0 (implicit MAML) or "
                    "problems.inner.method: first_order (first-order MAML)");
  }
  if (config.engine.strategy() != dist::Strategy::kDefault) {
    config.fail("engine.strategy", "the fewshot experiment runs in one process (tasks are small)");
  }
}

FewshotExperiment::FewshotExperiment(const run::RunConfig& config)
    : config_(config), settings_(config.settings_as<Settings>()) {
  if (config_.threads > 0) torch::set_num_threads(static_cast<int>(config_.threads));
  const FewshotConfig& f = settings_.fewshot;
  const uint64_t seed = static_cast<uint64_t>(config_.seed);
  device_ = run::resolve_device(config_);
  regression_ = f.tasks == "sinusoid";
  if (regression_) {
    train_tasks_ = std::make_shared<SinusoidTasks>(f.shots, f.queries);
    valid_tasks_ = test_tasks_ = train_tasks_;
    data_description_ = train_tasks_->describe();
  } else {
    data::DatasetRequest request;
    request.root = data::prepare_dataset(settings_.data.dataset, settings_.data.root,
                                         settings_.data.download);
    request.seed = seed;
    const data::ImageDataset images = data::load_dataset(settings_.data.dataset, request);
    synthetic_ = images.synthetic;
    const auto classes = static_cast<int64_t>(images.class_names.size());
    for (const auto& [key, list] : {std::pair<const char*, const std::vector<int64_t>*>{
                                        "fewshot.train_classes", &f.train_classes},
                                    {"fewshot.test_classes", &f.test_classes}}) {
      for (const int64_t c : *list) {
        if (c >= classes) {
          config_.fail(key, "class " + std::to_string(c) + " is not a class of " +
                                settings_.data.dataset + " (classes 0.." +
                                std::to_string(classes - 1) + ")");
        }
      }
    }
    const auto [train_x, train_y] = of_classes(images.train_images, images.train_targets,
                                               f.train_classes);
    const auto [valid_x, valid_y] = of_classes(images.train_images, images.train_targets,
                                               f.test_classes);
    const auto [test_x, test_y] = of_classes(images.test_images, images.test_targets,
                                             f.test_classes);
    train_tasks_ = std::make_shared<ClassTasks>(train_x, train_y, f.train_classes, f.ways,
                                                f.shots, f.queries, "meta-training");
    valid_tasks_ = std::make_shared<ClassTasks>(valid_x, valid_y, f.test_classes, f.ways,
                                                f.shots, f.queries, "validation");
    test_tasks_ = std::make_shared<ClassTasks>(test_x, test_y, f.test_classes, f.ways, f.shots,
                                               f.queries, "test");
    // Pre-training labels: the position of each image's class among the training classes.
    pretrain_images_ = train_x;
    pretrain_labels_ = at::empty_like(train_y);
    for (size_t i = 0; i < f.train_classes.size(); ++i) {
      pretrain_labels_.masked_fill_(train_y.eq(f.train_classes[i]), static_cast<int64_t>(i));
    }
    image_shape_ = {train_x.size(1), train_x.size(2), train_x.size(3)};
    data_description_ = images.description + "; " + train_tasks_->describe() + "; " +
                        test_tasks_->describe();
  }
  torch::manual_seed(seed);
  pretrain();

  const auto model = [&] {
    return make_model(regression_, train_tasks_->outputs(), f.hidden, f.channels, image_shape_);
  };
  outer_ = std::make_shared<MetaLearner>("outer", config_.problems.at("outer").config);
  inner_ = std::make_shared<Learner>("inner", config_.problems.at("inner").config, f.reg,
                                     regression_);
  outer_->module(model());
  inner_->module(model());
  run::setup_problem(*outer_, config_);
  run::setup_problem(*inner_, config_);
  const ProblemConfig& inner = config_.problems.at("inner").config;
  environment_ = std::make_shared<TaskEnvironment>(
      train_tasks_, inner.unroll_steps() * inner.gradient_accumulation(), seed);
  inner_->data(environment_->stream("support"));
  outer_->data(environment_->stream("query"));
  engine_ = std::make_unique<Engine>(config_.engine);
  engine_->environment(environment_);
  run::add_problems(*engine_, config_, {outer_, inner_});
}

void FewshotExperiment::pretrain() {
  const FewshotConfig& f = settings_.fewshot;
  const int64_t outputs = regression_ ? 1 : static_cast<int64_t>(f.train_classes.size());
  pretrained_ = make_model(regression_, outputs, f.hidden, f.channels, image_shape_);
  pretrained_->to(device_);
  if (f.pretrain_steps == 0) return;
  spdlog::info("fewshot: pre-training the fine-tuning baseline ({} Adam steps)", f.pretrain_steps);
  torch::optim::Adam adam(pretrained_->parameters(), torch::optim::AdamOptions(f.pretrain_lr));
  at::Generator generator = seeded(static_cast<uint64_t>(config_.seed) + kPretrainSeed);
  for (int64_t step = 0; step < f.pretrain_steps; ++step) {
    Batch batch;
    if (regression_) {
      const Task task = train_tasks_->sample(generator);
      batch = Batch(at::cat({task.support.data, task.query.data}),
                    at::cat({task.support.target, task.query.target}));
    } else {
      const at::Tensor pick =
          at::randint(pretrain_images_.size(0), {f.pretrain_batch}, generator,
                      at::TensorOptions().dtype(at::kLong));
      batch = Batch(pretrain_images_.index_select(0, pick),
                    pretrain_labels_.index_select(0, pick));
    }
    batch = batch.to(device_);
    adam.zero_grad();
    task_loss(pretrained_->forward(batch.data), batch.target, regression_).backward();
    adam.step();
  }
}

const std::vector<Task>& FewshotExperiment::eval_tasks(run::EvalSet set) {
  auto it = eval_tasks_.find(set);
  if (it != eval_tasks_.end()) return it->second;
  const bool valid = set == run::EvalSet::kValid;
  at::Generator generator =
      seeded(static_cast<uint64_t>(config_.seed) + (valid ? kValidSeed : kTestSeed));
  const TaskSampler& sampler = valid ? *valid_tasks_ : *test_tasks_;
  std::vector<Task> tasks;
  for (int64_t i = 0; i < settings_.fewshot.eval_tasks; ++i) {
    tasks.push_back(to_device(sampler.sample(generator), device_));
  }
  return eval_tasks_.emplace(set, std::move(tasks)).first->second;
}

Metrics FewshotExperiment::evaluate(run::EvalSet set) {
  const FewshotConfig& f = settings_.fewshot;
  const run::ProblemSection& inner = config_.problems.at("inner");
  // (the inner problem's optimizer steps per task)
  const int64_t adapt_steps = f.adapt_steps > 0 ? f.adapt_steps : inner.config.unroll_steps();
  const int64_t baseline_steps = f.baseline_steps > 0 ? f.baseline_steps : adapt_steps;
  // (every adaptation clips as the inner problem's training steps do)
  const double clip = inner.config.gradient_clipping();
  const std::vector<Task>& tasks = eval_tasks(set);
  const std::string prefix = set == run::EvalSet::kValid ? "valid/" : "";
  const double n = static_cast<double>(tasks.size());
  const auto add = [&](Metrics& out, const std::string& name, const Adapted& a) {
    out[prefix + name + "loss"] += a.loss / n;
    if (regression_) out[prefix + name + "mse"] += a.loss / n;
    if (!regression_) out[prefix + name + "acc"] += a.acc / n;
  };

  const bool was_training = outer_->module().is_training();
  Metrics out;
  const torch::nn::Sequential theta(outer_->module_as<torch::nn::SequentialImpl>());
  for (const Task& task : tasks) {
    add(out, "", adapt(theta, task, adapt_steps, inner.optimizer, f.reg, clip, regression_));
  }
  auto cached = baselines_.find(set);
  if (cached == baselines_.end()) {
    // The baselines do not depend on theta: once per set. (A seed of their own for the
    // scratch models, so that no evaluation moves another's numbers.)
    Metrics baselines;
    // The fresh models draw from the default generator: seeded here, and put back after, so
    // that an evaluation changes nothing the training may draw later.
    at::Generator global = default_cpu_generator();
    const at::Tensor saved = rng_state(global);
    global.set_current_seed(static_cast<uint64_t>(config_.seed) + kScratchSeed);
    for (const Task& task : tasks) {
      torch::nn::Sequential fresh = make_model(regression_, test_tasks_->outputs(), f.hidden,
                                               f.channels, image_shape_);
      fresh->to(device_);
      add(baselines, "scratch_", adapt(fresh, task, baseline_steps, inner.optimizer, 0.0, clip,
                                        regression_));
      add(baselines, "finetune_", adapt(pretrained_, task, baseline_steps, inner.optimizer, 0.0,
                                         clip, regression_, regression_ ? 0 : f.ways));
    }
    set_rng_state(global, saved);
    cached = baselines_.emplace(set, std::move(baselines)).first;
  }
  for (const auto& [name, value] : cached->second) out[name] = value;
  outer_->module().train(was_training);
  return out;
}

std::vector<std::string> FewshotExperiment::metric_names() const {
  if (regression_) return {"mse", "scratch_mse", "finetune_mse"};
  return {"acc", "scratch_acc", "finetune_acc", "loss"};
}

std::string FewshotExperiment::describe() const {
  const FewshotConfig& f = settings_.fewshot;
  const ProblemConfig& inner = config_.problems.at("inner").config;
  const ProblemConfig& outer = config_.problems.at("outer").config;
  std::ostringstream out;
  out << "data: " << data_description_ << "\n";
  out << "inner: adapts to one task per unroll of " << inner.unroll_steps()
      << " steps from the meta-learner's parameters, proximal weight reg " << f.reg
      << " (hypergradient: " << inner.method().name() << "); outer: the initialization, "
      << outer.gradient_accumulation() << " task(s) per meta-batch; evaluation on "
      << f.eval_tasks << " tasks per split; baselines: scratch, fine-tuned after "
      << f.pretrain_steps << " pre-training steps";
  return out.str();
}

std::string FewshotExperiment::report(const Metrics& test, const Metrics& valid) const {
  const std::string metric = regression_ ? "mse" : "acc";
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-22s %14s %14s %14s\n", "", "meta-learned", "scratch",
                "fine-tuned");
  out << "few-shot " << metric << " after adaptation: meta-learned vs the baselines\n" << line;
  const auto row = [&](const char* label, const Metrics& m, const std::string& prefix) {
    const auto get = [&](const std::string& name) {
      const auto it = m.find(prefix + name);
      return it == m.end() ? 0.0 : it->second;
    };
    std::snprintf(line, sizeof(line), "%-22s %14.6f %14.6f %14.6f\n", label, get(metric),
                  get("scratch_" + metric), get("finetune_" + metric));
    out << line;
  };
  if (!valid.empty()) row(("validation " + metric).c_str(), valid, "valid/");
  row(("test " + metric).c_str(), test, "");
  return out.str();
}

}  // namespace fewshot
}  // namespace problems

MLO_REGISTER_EXPERIMENT(problems::fewshot::FewshotExperiment);

}  // namespace mlo
