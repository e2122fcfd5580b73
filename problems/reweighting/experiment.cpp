#include "problems/reweighting/experiment.h"

#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>
#include <mlo/data/fashion_mnist.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/stream.h>
#include <mlo/data/synthetic.h>
#include <mlo/data/transforms.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/cnn.h>
#include <mlo/nn/mwn.h>
#include <mlo/nn/resnet.h>
#include <mlo/run/builders.h>
#include <mlo/run/sharding.h>

#include "problems/reweighting/class_mwn.h"

#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

namespace mlo {
namespace run {
namespace detail {
// Referenced by the registry: keeps this file's registration in a static link.
void link_reweighting_experiment() {}
}  // namespace detail
}  // namespace run

namespace problems {
namespace reweighting {
namespace {

constexpr int64_t kClasses = ReweightingExperiment::kClasses;
constexpr const char* kCifarRoot = "data/cifar-10-batches-bin";

std::string root_or(const std::string& root, const std::string& fallback) {
  return root.empty() ? fallback : root;
}

// Whether a ResNet runs channels-last: as asked, or for "auto" where bench/resnet_formats
// measured it faster on CPU (ResNet-50's wide bottlenecks; ResNet-32's 16-64 channels run
// faster in NCHW in fp32).
bool channels_last(const ModelConfig& c) {
  if (c.memory_format == "auto") return c.name == "resnet50";
  return c.memory_format == "channels_last";
}

// `data.meta_batch_size`, where 0 means the training batch size.
int64_t meta_batch_size(const DataConfig& d) {
  return d.meta_batch_size > 0 ? d.meta_batch_size : d.batch_size;
}

// The model `config` names; `channels` and `image_size` describe the input images.
std::shared_ptr<torch::nn::Module> make_model(const ModelConfig& c, int64_t channels,
                                              int64_t image_size, int64_t num_classes,
                                              const std::string& key) {
  run::check_name(c.name, model_names(), "model", key + ".model.name");
  if (c.name == "mwn") return mlo::nn::MWN(mlo::nn::MWNOptions(c.hidden)).ptr();
  if (c.name == "cnn") {
    return mlo::nn::cnn(mlo::nn::CNNOptions()
                            .in_channels(channels)
                            .image_size(image_size)
                            .num_classes(num_classes)
                            .batch_norm(c.batch_norm))
        .ptr();
  }
  MLO_INTERNAL_ASSERT(c.name == "resnet32" || c.name == "resnet50", "model '", c.name,
                      "' has no builder");
  auto options = c.name == "resnet50" ? mlo::nn::resnet50_options(num_classes)
                                      : mlo::nn::resnet32_options(num_classes);
  return mlo::nn::resnet(options.in_channels(channels)
                             .inplace_relu(c.inplace_relu)
                             .channels_last(channels_last(c)))
      .ptr();
}

}  // namespace

std::vector<std::string> dataset_class_names(const std::string& dataset) {
  if (dataset == "fashion_mnist") return data::FashionMnist::class_names();
  if (dataset == "cifar10") return data::Cifar10::class_names();
  std::vector<std::string> names;
  for (int64_t c = 0; c < kClasses; ++c) names.push_back("class" + std::to_string(c));
  return names;
}

data::TransformOptions transform_options(const std::string& dataset, bool train) {
  return dataset == "fashion_mnist" ? data::TransformOptions::fashion_mnist(train)
                                    : data::TransformOptions::cifar10(train);
}

// ---------------------------------------------------------------------------------------------
// The experiment.

ReweightingExperiment::ReweightingExperiment(const run::RunConfig& config)
    : config_(config), settings_(config.settings_as<Settings>()) {
  if (config_.threads > 0) torch::set_num_threads(static_cast<int>(config_.threads));
  torch::manual_seed(static_cast<uint64_t>(config_.seed));
  load_data();
  build_problems();
}

void ReweightingExperiment::load_data() {
  const DataConfig& d = settings_.data;
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
  class_names_ = dataset_class_names(dataset);
  if (dataset == "fashion_mnist") {
    const std::string root = root_or(d.root, data::FashionMnistOptions::kDefaultRoot);
    data::FashionMnist train(data::FashionMnistOptions(root).split(data::Split::kTrain));
    data::FashionMnist test(data::FashionMnistOptions(root).split(data::Split::kTest));
    images = train.images();
    targets = train.targets();
    test_images_ = test.images();
    test_targets_ = test.targets();
    dataset_name_ = "Fashion-MNIST (" + root + ")";
  } else if (dataset == "cifar10") {
    const std::string root = root_or(d.root, kCifarRoot);
    data::Cifar10 train(data::Cifar10Options(root).split(data::Split::kTrain));
    data::Cifar10 test(data::Cifar10Options(root).split(data::Split::kTest));
    images = train.images();
    targets = train.targets();
    test_images_ = test.images();
    test_targets_ = test.targets();
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

void ReweightingExperiment::build_problems() {
  const DataConfig& d = settings_.data;
  const auto seed = static_cast<uint64_t>(config_.seed);
  const int64_t channels = train_images_.size(1);
  const int64_t size = train_images_.size(2);
  const run::ProblemSettings& cs = config_.problems.at("classifier");
  const run::DependencyConfig graph = run::resolved_dependencies(config_);

  classifier_ = std::make_shared<Classifier>("classifier",
                                             run::make_problem_config(cs, "problems.classifier"));
  classifier_->module(
      make_model(settings_.model("classifier"), channels, size, kClasses, "problems.classifier"));
  classifier_->optimizer(
      run::make_optimizer(cs.optimizer, classifier_->module(), "problems.classifier"));
  const int64_t classifier_steps = config_.engine.train_iters / cs.gradient_accumulation;
  if (auto schedule = run::make_schedule(cs.scheduler, classifier_steps, "problems.classifier")) {
    classifier_->scheduler(schedule);
  }
  // Under a distributed strategy each rank reads its slice of every global batch (the YAML's
  // batch sizes are global).
  const data::Shard train_shard = run::data_shard(config_, "classifier");
  run::check_shardable(config_, "data.batch_size", d.batch_size, train_shard);
  train_stream_ = std::make_shared<data::LoaderStream>(
      train_images_, train_targets_,
      data::LoaderOptions(d.batch_size).seed(seed).drop_last(true).shard(train_shard),
      data::make_transform(transform_options(dataset_, d.augment)));
  classifier_->data(train_stream_);

  classifier_->num_classes = kClasses;
  classifier_->normalize_weights = settings_.reweighting.normalize_weights;
  classifier_->freeze_weight_inputs = settings_.reweighting.freeze_weight_inputs;
  engine_ = std::make_unique<Engine>(run::make_engine_config(config_.engine));
  engine_->add(classifier_);
  const std::string& method = settings_.reweighting.method;
  if (method == "l2rw") {
    // Learning to Reweight: no upper problem; the classifier draws meta batches itself.
    meta_stream_ = std::make_shared<data::LoaderStream>(
        meta_images_, meta_targets_, data::LoaderOptions(meta_batch_size(d)).seed(seed + 1),
        data::make_transform(transform_options(dataset_, /*train=*/false)));
    auto stream = meta_stream_;
    classifier_->l2rw_meta = [stream] { return stream->next(); };
    classifier_->l2rw_alpha = settings_.reweighting.l2rw_alpha;
    return;
  }

  const auto found = config_.problems.find("reweighter");
  if (found == config_.problems.end()) return;  // the baseline: plain training
  const run::ProblemSettings& rs = found->second;
  reweighter_ = std::make_shared<Reweighter>("reweighter",
                                             run::make_problem_config(rs, "problems.reweighter"));
  if (method == "class_mwn") {
    reweighter_->module(ClassMWN(settings_.model("reweighter").hidden, train_counts_));
  } else {
    reweighter_->module(
        make_model(settings_.model("reweighter"), channels, size, kClasses, "problems.reweighter"));
  }
  reweighter_->optimizer(
      run::make_optimizer(rs.optimizer, reweighter_->module(), "problems.reweighter"));
  const int64_t reweighter_steps = classifier_steps / cs.unroll_steps / rs.gradient_accumulation;
  if (auto schedule = run::make_schedule(rs.scheduler, reweighter_steps, "problems.reweighter")) {
    reweighter_->scheduler(schedule);
  }
  // NOTE: a sharded stream cannot split a smaller last batch evenly, so under a distributed
  // strategy the meta stream drops it (whatever the world size, so that the batches do not
  // depend on it).
  const bool meta_sharded = config_.engine.strategy != dist::Strategy::kDefault && rs.data_parallel;
  const data::Shard meta_shard = run::data_shard(config_, "reweighter");
  run::check_shardable(config_, d.meta_batch_size > 0 ? "data.meta_batch_size" : "data.batch_size",
                       meta_batch_size(d), meta_shard);
  meta_stream_ = std::make_shared<data::LoaderStream>(
      meta_images_, meta_targets_,
      data::LoaderOptions(meta_batch_size(d))
          .seed(seed + 1)
          .drop_last(meta_sharded)
          .shard(meta_shard),
      data::make_transform(transform_options(dataset_, /*train=*/false)));
  reweighter_->data(meta_stream_);
  classifier_->reweighter = reweighter_.get();
  reweighter_->classifier = classifier_.get();
  engine_->add(reweighter_);

  // The problems by name (the settings' check allows only these two).
  auto by_name = [&](const std::string& name) -> ProblemPtr {
    if (name == "classifier") return classifier_;
    MLO_CHECK(name == "reweighter", "dependencies: the reweighting experiment has no problem '",
              name, "'");
    return reweighter_;
  };
  for (const auto& [upper, lowers] : graph.u2l) {
    for (const auto& lower : lowers) engine_->u2l(by_name(upper), by_name(lower));
  }
  for (const auto& [lower, uppers] : graph.l2u) {
    for (const auto& upper : uppers) engine_->l2u(by_name(lower), by_name(upper));
  }
}

Batch ReweightingExperiment::sample_batch(const std::string& name) {
  if (name == "reweighter" && meta_stream_) return meta_stream_->next();
  MLO_CHECK(name == "classifier", "the reweighting experiment has no problem '", name,
            "' (its problems: classifier", reweighter_ ? ", reweighter" : "", ")");
  return train_stream_->next();
}

}  // namespace reweighting
}  // namespace problems

MLO_REGISTER_EXPERIMENT("reweighting", problems::reweighting::ReweightingExperiment);

}  // namespace mlo
