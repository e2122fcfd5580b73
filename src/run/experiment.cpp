#include <mlo/run/experiment.h>

#include "builders.h"
#include "problems/reweighting/reweighting.h"

#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>
#include <mlo/data/fashion_mnist.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/stream.h>
#include <mlo/data/synthetic.h>
#include <mlo/data/transforms.h>
#include <mlo/nn/chain.h>

#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <filesystem>
#include <sstream>

namespace mlo {
namespace run {
namespace {

using problems::reweighting::Classifier;
using problems::reweighting::Reweighter;

constexpr int64_t kClasses = 10;
constexpr const char* kCifarRoot = "data/cifar-10-batches-bin";

std::string root_or(const std::string& root, const std::string& fallback) {
  return root.empty() ? fallback : root;
}

data::TransformOptions transform_options(const std::string& dataset, bool train) {
  return dataset == "fashion_mnist" ? data::TransformOptions::fashion_mnist(train)
                                    : data::TransformOptions::cifar10(train);
}

}  // namespace

Experiment::Experiment(const RunConfig& config) : config_(config) {
  if (config_.threads > 0) torch::set_num_threads(static_cast<int>(config_.threads));
  torch::manual_seed(static_cast<uint64_t>(config_.seed));
  load_data();
  build_problems();
}

Experiment::~Experiment() {
  // NOTE: the two problems hold typed handles to each other (shared_ptr both ways); without
  // breaking the cycle here neither would be freed, with its model, optimizer state and data
  // (LeakSanitizer, scripts/test.sh --sanitize).
  if (classifier_) classifier_->reweighter.reset();
  if (reweighter_) reweighter_->classifier.reset();
}

void Experiment::load_data() {
  const DataConfig& d = config_.data;
  at::Tensor images, targets;
  std::string dataset = d.dataset;
  if (d.synthetic_fallback && dataset != "synthetic") {
    const bool present =
        dataset == "cifar10"
            ? (std::filesystem::exists(root_or(d.root, kCifarRoot) + "/data_batch_1.bin") ||
               std::filesystem::exists(root_or(d.root, kCifarRoot) +
                                       "/cifar-10-batches-bin/data_batch_1.bin"))
            : std::filesystem::exists(root_or(d.root, data::FashionMnistOptions::kDefaultRoot) +
                                      "/train-images-idx3-ubyte.gz");
    if (!present) {
      spdlog::warn(
          "{} files not found under '{}': using SYNTHETIC data instead "
          "(data.synthetic_fallback is on)",
          dataset,
          dataset == "cifar10" ? root_or(d.root, kCifarRoot)
                               : root_or(d.root, data::FashionMnistOptions::kDefaultRoot));
      dataset = "synthetic";
    }
  }
  dataset_ = dataset;
  if (dataset == "fashion_mnist") {
    const std::string root = root_or(d.root, data::FashionMnistOptions::kDefaultRoot);
    data::FashionMnist train(data::FashionMnistOptions(root).split(data::Split::kTrain));
    data::FashionMnist test(data::FashionMnistOptions(root).split(data::Split::kTest));
    images = train.images();
    targets = train.targets();
    test_images_ = test.images();
    test_targets_ = test.targets();
    class_names_ = data::FashionMnist::class_names();
    dataset_name_ = "Fashion-MNIST (" + root + ")";
  } else if (dataset == "cifar10") {
    const std::string root = root_or(d.root, kCifarRoot);
    data::Cifar10 train(data::Cifar10Options(root).split(data::Split::kTrain));
    data::Cifar10 test(data::Cifar10Options(root).split(data::Split::kTest));
    images = train.images();
    targets = train.targets();
    test_images_ = test.images();
    test_targets_ = test.targets();
    class_names_ = data::Cifar10::class_names();
    dataset_name_ = "CIFAR-10 (" + train.folder() + ")";
  } else {
    const auto seed = static_cast<uint64_t>(config_.seed);
    data::SyntheticCifar train(data::SyntheticOptions(d.synthetic_size * kClasses).seed(seed));
    data::SyntheticCifar test(
        data::SyntheticOptions(d.synthetic_test_size * kClasses).seed(seed + 1000));
    images = train.images();
    targets = train.targets();
    test_images_ = test.images();
    test_targets_ = test.targets();
    for (int64_t c = 0; c < kClasses; ++c) class_names_.push_back("class" + std::to_string(c));
    dataset_name_ = "synthetic CIFAR-shaped data (not real data)";
    synthetic_ = true;
  }
  // Meta and validation sets are held out first (balanced), then the rest is made long-tailed.
  const auto split =
      data::long_tail_split(targets, data::LongTailOptions(kClasses, d.imbalance, d.meta_size)
                                         .valid_size(d.valid_size)
                                         .shuffle_classes(d.shuffle_classes)
                                         .seed(static_cast<uint64_t>(config_.seed)));
  train_images_ = images.index_select(0, split.train_indices);
  train_targets_ = targets.index_select(0, split.train_indices);
  meta_images_ = images.index_select(0, split.meta_indices);
  meta_targets_ = targets.index_select(0, split.meta_indices);
  valid_images_ = images.index_select(0, split.valid_indices);
  valid_targets_ = targets.index_select(0, split.valid_indices);
  train_counts_ = split.train_counts;
}

void Experiment::build_problems() {
  const DataConfig& d = config_.data;
  const auto seed = static_cast<uint64_t>(config_.seed);
  const int64_t channels = train_images_.size(1);
  const int64_t size = train_images_.size(2);
  const ProblemSettings& cs = config_.problems.at("classifier");

  // A setting that acts only on a lower problem, set on a problem with no parent, would be
  // silently ignored: refuse it (the YAML reader says so too, with the file and line).
  const DependencyConfig graph = resolved_dependencies(config_);
  for (const auto& [name, settings] : config_.problems) {
    const std::string key = lower_only_setting(settings);
    MLO_CHECK(key.empty() || !parents_of(graph, name).empty(), "problems.", name, ".", key,
              ": acts only on a lower problem, and '", name,
              "' has no problem above it in the dependency graph; remove it");
  }

  classifier_ = std::make_shared<Classifier>(
      "classifier", detail::make_problem_config(cs, "problems.classifier"));
  classifier_->module(
      detail::make_model(cs.model, channels, size, kClasses, "problems.classifier"));
  classifier_->optimizer(
      detail::make_optimizer(cs.optimizer, classifier_->module(), "problems.classifier"));
  const int64_t classifier_steps = config_.engine.train_iters / cs.gradient_accumulation;
  if (auto schedule =
          detail::make_schedule(cs.scheduler, classifier_steps, "problems.classifier")) {
    classifier_->scheduler(schedule);
  }
  train_stream_ = std::make_shared<data::LoaderStream>(
      train_images_, train_targets_, data::LoaderOptions(d.batch_size).seed(seed).drop_last(true),
      data::make_transform(transform_options(dataset_, d.augment)));
  classifier_->data(train_stream_);

  EngineConfig engine_config = EngineConfig()
                                   .train_iters(config_.engine.train_iters)
                                   .valid_step(config_.engine.valid_step)
                                   .log_step(config_.engine.log_step)
                                   .track_memory(config_.engine.track_memory);
  if (config_.engine.early_stopping.enabled) {
    const auto& e = config_.engine.early_stopping;
    engine_config.early_stopping(EarlyStopping()
                                     .metric(e.metric)
                                     .mode(from_string<Mode>(e.mode, "engine.early_stopping.mode"))
                                     .tolerance(e.tolerance)
                                     .min_delta(e.min_delta));
  }
  engine_ = std::make_unique<Engine>(engine_config);
  engine_->add(classifier_);

  const auto found = config_.problems.find("reweighter");
  if (found == config_.problems.end()) return;  // the baseline: plain training
  const ProblemSettings& rs = found->second;
  reweighter_ = std::make_shared<Reweighter>(
      "reweighter", detail::make_problem_config(rs, "problems.reweighter"));
  reweighter_->module(
      detail::make_model(rs.model, channels, size, kClasses, "problems.reweighter"));
  reweighter_->optimizer(
      detail::make_optimizer(rs.optimizer, reweighter_->module(), "problems.reweighter"));
  const int64_t reweighter_steps = classifier_steps / cs.unroll_steps / rs.gradient_accumulation;
  if (auto schedule =
          detail::make_schedule(rs.scheduler, reweighter_steps, "problems.reweighter")) {
    reweighter_->scheduler(schedule);
  }
  reweighter_->data(std::make_shared<data::LoaderStream>(
      meta_images_, meta_targets_, data::LoaderOptions(d.meta_batch_size).seed(seed + 1),
      data::make_transform(transform_options(dataset_, /*train=*/false))));
  classifier_->reweighter = reweighter_;
  classifier_->normalize_weights = config_.reweighting.normalize_weights;
  reweighter_->classifier = classifier_;
  engine_->add(reweighter_);

  const DependencyConfig& deps = graph;
  auto by_name = [&](const std::string& name) -> ProblemPtr {
    if (name == "classifier") return classifier_;
    return reweighter_;
  };
  for (const auto& [upper, lowers] : deps.u2l) {
    for (const auto& lower : lowers) engine_->u2l(by_name(upper), by_name(lower));
  }
  for (const auto& [lower, uppers] : deps.l2u) {
    for (const auto& upper : uppers) engine_->l2u(by_name(lower), by_name(upper));
  }
}

std::shared_ptr<Problem> Experiment::problem(const std::string& name) const {
  if (name == "classifier") return classifier_;
  MLO_CHECK(name == "reweighter" && reweighter_, "the experiment has no problem '", name, "'");
  return reweighter_;
}

Batch Experiment::sample_batch() { return train_stream_->next(); }

std::vector<int64_t> Experiment::valid_counts() const {
  return data::class_counts(valid_targets_, kClasses);
}

Metrics Experiment::evaluate(EvalSet set) {
  const at::Tensor& images = set == EvalSet::kValid ? valid_images_ : test_images_;
  const at::Tensor& targets = set == EvalSet::kValid ? valid_targets_ : test_targets_;
  const std::string prefix = set == EvalSet::kValid ? "valid/" : "";
  torch::NoGradGuard no_grad;
  const bool was_training = classifier_->is_training();
  classifier_->eval();
  const auto normalize = data::make_transform(transform_options(dataset_, false));
  at::Generator generator = at::detail::createCPUGenerator(0);
  std::vector<int64_t> correct(kClasses, 0), total(kClasses, 0);
  double loss_sum = 0;
  const int64_t n = images.size(0);
  for (int64_t begin = 0; begin < n; begin += config_.data.test_batch_size) {
    const int64_t end = std::min(n, begin + config_.data.test_batch_size);
    const at::Tensor x = normalize(images.slice(0, begin, end), generator);
    const at::Tensor y = targets.slice(0, begin, end);
    const at::Tensor logits = classifier_->logits(x).to(at::kFloat);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    const at::Tensor hit = logits.argmax(1).eq(y);
    for (int64_t c = 0; c < kClasses; ++c) {
      const at::Tensor mask = y.eq(c);
      total[c] += mask.sum().item<int64_t>();
      correct[c] += hit.logical_and(mask).sum().item<int64_t>();
    }
  }
  classifier_->train(was_training);
  Metrics out;
  int64_t all_correct = 0, all = 0;
  double balanced = 0;
  int64_t present = 0;
  for (int64_t c = 0; c < kClasses; ++c) {
    all_correct += correct[c];
    all += total[c];
    if (total[c] == 0) continue;
    const double acc = static_cast<double>(correct[c]) / static_cast<double>(total[c]);
    out[prefix + "acc/" + class_names_[static_cast<size_t>(c)]] = acc;
    balanced += acc;
    ++present;
  }
  out[prefix + "acc"] = all ? static_cast<double>(all_correct) / static_cast<double>(all) : 0.0;
  out[prefix + "balanced_acc"] = present ? balanced / static_cast<double>(present) : 0.0;
  out[prefix + "loss"] = all ? loss_sum / static_cast<double>(all) : 0.0;
  return out;
}

std::string Experiment::describe() const {
  std::ostringstream out;
  out << "data: " << dataset_name_ << "; long-tailed training set of " << train_images_.size(0)
      << " images (imbalance " << config_.data.imbalance << "), balanced meta set of "
      << meta_images_.size(0) << ", balanced validation set of " << valid_images_.size(0)
      << " (held out of the training data; validation and early stopping), test set of "
      << test_images_.size(0) << " (final report only)\n";
  out << "training images per class:";
  for (size_t c = 0; c < train_counts_.size(); ++c) {
    out << " " << class_names_[c] << "=" << train_counts_[c];
  }
  out << "\nclassifier: " << config_.problems.at("classifier").model.name
      << (reweighter_ ? ", reweighter: mwn (hypergradient: " +
                            config_.problems.at("classifier").method + ")"
                      : std::string(", no reweighter (baseline)"));
  return out.str();
}

}  // namespace run
}  // namespace mlo
