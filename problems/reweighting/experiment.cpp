#include "problems/reweighting/experiment.h"

#include <mlo/base/error.h>
#include <mlo/base/number_text.h>
#include <mlo/data/label_noise.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/registry.h>
#include <mlo/data/stream.h>
#include <mlo/data/transforms.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/registry.h>
#include <mlo/run/builders.h>
#include <mlo/run/device.h>
#include <mlo/run/sharding.h>

#include "problems/reweighting/class_mwn.h"
#include "problems/reweighting/class_priors.h"

#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

// `data.meta_batch_size`, where 0 means the training batch size.
int64_t meta_batch_size(const DataConfig& d) {
  return d.meta_batch_size > 0 ? d.meta_batch_size : d.batch_size;
}

// The model of `problems.<name>.model` for the data's images.
std::shared_ptr<torch::nn::Module> make_model(const ModelConfig& c, int64_t channels,
                                              int64_t image_size, int64_t num_classes,
                                              const std::string& key) {
  (void)key;
  return c.make(nn::ModelInput{channels, image_size, num_classes});
}

}  // namespace

std::vector<std::string> dataset_class_names(const std::string& dataset) {
  return data::dataset_entry(dataset).class_names;
}

data::TransformOptions transform_options(const std::string& dataset, bool train) {
  return data::dataset_transform(dataset, train);
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
  std::string dataset = d.dataset;
  std::string root = d.root;
  if (!d.download && d.synthetic_fallback && !data::dataset_present(dataset, d.root)) {
    const bool downloadable = !data::dataset_entry(dataset).source.files.empty();
    spdlog::warn(
        "{} files not found under '{}': using SYNTHETIC data instead "
        "(data.synthetic_fallback is on{})",
        dataset, data::dataset_root(dataset, d.root),
        downloadable ? "; data.download: true would fetch them" : "");
    dataset = "synthetic";
  } else {
    // Missing files: fetched when data.download is on, else an error saying how to get them.
    root = data::prepare_dataset(dataset, d.root, d.download);
  }
  dataset_ = dataset;
  data::DatasetRequest request;
  request.root = root;
  request.seed = static_cast<uint64_t>(config_.seed);
  request.synthetic_per_class = d.synthetic_size;
  request.synthetic_test_per_class = d.synthetic_test_size;
  data::ImageDataset loaded = data::load_dataset(dataset, request);
  const at::Tensor images = loaded.train_images;
  const at::Tensor targets = loaded.train_targets;
  test_images_ = loaded.test_images;
  test_targets_ = loaded.test_targets;
  class_names_ = loaded.class_names;
  dataset_name_ = loaded.description;
  synthetic_ = loaded.synthetic;
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
  split_counts_ = split.train_counts;
  clean_train_targets_ = train_targets_;
  const LabelNoiseConfig& noise = d.label_noise;
  if (noise.type != "none") {
    const uint64_t noise_seed =
        static_cast<uint64_t>(noise.seed >= 0 ? noise.seed : config_.seed);
    const auto result = data::corrupt_labels(
        train_targets_,
        data::LabelNoiseOptions(noise.type == "flip" ? data::LabelNoise::kFlip
                                                     : data::LabelNoise::kUniform,
                                noise.ratio, kClasses)
            .seed(noise_seed));
    train_targets_ = result.labels;
    // Counts of the labels the classifier sees: what a prior-based method can know.
    train_counts_ = data::class_counts(train_targets_, kClasses);
    char rate[32];
    std::snprintf(rate, sizeof(rate), "%.2f%%", 100.0 * result.rate());
    noise_line_ = "label noise: " + noise.type + " " + number_text(noise.ratio) + " (seed " +
                  std::to_string(noise_seed) + "): " + std::to_string(result.corrupted) +
                  " of " + std::to_string(result.total) + " training labels changed (" + rate +
                  "); meta, validation and test labels clean";
    noise_line_ += "\nlabel noise: training samples by true class (rows) and given label (columns):";
    for (const auto& line : data::confusion_lines(result.confusion, class_names_)) {
      noise_line_ += "\n  " + line;
    }
  }
  for (size_t c = 0; c < train_counts_.size(); ++c) {
    MLO_CHECK(train_counts_[c] > 0, "data.imbalance: ", number_text(d.imbalance),
              " leaves class '", class_names_[c], "' no training image (",
              *std::max_element(split_counts_.begin(), split_counts_.end()),
              " in the largest class); lower data.imbalance or use more data");
  }
  // A balanced split has no 3 rarest classes: rare3_acc would be 3 classes picked by label.
  std::vector<int64_t> sorted = split_counts_;
  std::sort(sorted.begin(), sorted.end());
  has_rare_classes_ = sorted.size() > 3 && sorted[2] < sorted.back();
  const auto& stopping = config_.engine.early_stopping();
  MLO_CHECK(has_rare_classes_ || !stopping.enabled() || stopping.metric() != "valid/rare3_acc",
            "engine.early_stopping.metric: valid/rare3_acc needs rare classes, and the training "
            "split is balanced (data.imbalance ", number_text(d.imbalance),
            ": its third-rarest class has as many training images as its largest, ",
            sorted.back(), "); choose valid/balanced_acc or valid/acc");
}

std::string ReweightingExperiment::model_name(const std::string& name) const {
  if (name != "classifier" && !settings_.reweighting.scheme().reads_model()) {
    return settings_.reweighting.scheme().name();  // (its own module, not a registered model)
  }
  return settings_.model(name).name();
}

void ReweightingExperiment::build_problems() {
  const DataConfig& d = settings_.data;
  const auto seed = static_cast<uint64_t>(config_.seed);
  const bool pin = run::resolve_device(config_).is_cuda();  // batches copied to a GPU
  const int64_t channels = train_images_.size(1);
  const int64_t size = train_images_.size(2);
  classifier_ =
      std::make_shared<Classifier>("classifier", config_.problems.at("classifier").config);
  classifier_->module(
      make_model(settings_.model("classifier"), channels, size, kClasses, "problems.classifier"));
  run::setup_problem(*classifier_, config_);
  // Under a distributed strategy each rank reads its slice of every global batch (the YAML's
  // batch sizes are global).
  const data::Shard train_shard = run::data_shard(config_, "classifier");
  train_stream_ = std::make_shared<data::LoaderStream>(
      train_images_, train_targets_,
      data::LoaderOptions(d.batch_size)
          .seed(seed)
          .drop_last(true)
          .shard(train_shard)
          .pin_memory(pin),
      data::make_transform(transform_options(dataset_, d.augment)));
  classifier_->data(train_stream_);

  classifier_->num_classes = kClasses;
  engine_ = std::make_unique<Engine>(config_.engine);
  const Scheme& scheme = settings_.reweighting.scheme();
  SchemeContext context{*classifier_, nullptr, train_counts_, {}};
  // (a meta batch larger than the meta set would silently be the whole set, each step)
  const auto check_meta_batch = [&] {
    if (meta_batch_size(d) <= meta_images_.size(0)) return;
    config_.fail(d.meta_batch_size > 0 ? "data.meta_batch_size" : "data.batch_size",
                 "a meta batch of " + std::to_string(meta_batch_size(d)) +
                     " is larger than the meta set's " + std::to_string(meta_images_.size(0)) +
                     " images (data.meta_size); choose at most that");
  };
  if (scheme.weight_net() == WeightNet::kNone) {
    // No upper problem; a scheme that needs meta batches (l2rw) draws them itself.
    meta_stream_ = std::make_shared<data::LoaderStream>(
        meta_images_, meta_targets_,
        data::LoaderOptions(meta_batch_size(d)).seed(seed + 1).pin_memory(pin),
        data::make_transform(transform_options(dataset_, /*train=*/false)));
    auto stream = meta_stream_;
    context.meta = [stream] { return stream->next(); };
    scheme.apply(context);
    run::add_problems(*engine_, config_, {classifier_});
    return;
  }
  const auto found = config_.problems.find("reweighter");
  if (found == config_.problems.end()) {  // the baseline: plain training
    scheme.apply(context);
    run::add_problems(*engine_, config_, {classifier_});
    return;
  }
  check_meta_batch();
  const ProblemConfig& rs = found->second.config;
  reweighter_ = std::make_shared<Reweighter>("reweighter", rs);
  reweighter_->module(scheme.weight_net_module(settings_.model("reweighter"), train_counts_));
  run::setup_problem(*reweighter_, config_);
  // NOTE: a sharded stream cannot split a smaller last batch evenly, so under a distributed
  // strategy the meta stream drops it (whatever the world size, so that the batches do not
  // depend on it).
  const bool meta_sharded = config_.engine.strategy() != dist::Strategy::kDefault && rs.data_parallel();
  const data::Shard meta_shard = run::data_shard(config_, "reweighter");
  meta_stream_ = std::make_shared<data::LoaderStream>(
      meta_images_, meta_targets_,
      data::LoaderOptions(meta_batch_size(d))
          .seed(seed + 1)
          .drop_last(meta_sharded)
          .shard(meta_shard)
          .pin_memory(pin),
      data::make_transform(transform_options(dataset_, /*train=*/false)));
  reweighter_->data(meta_stream_);
  context.reweighter = reweighter_.get();
  scheme.apply(context);
  run::add_problems(*engine_, config_, {classifier_, reweighter_});
}

Batch ReweightingExperiment::sample_batch(const std::string& name) {
  if (name == "reweighter" && meta_stream_) return meta_stream_->next();
  MLO_CHECK(name == "classifier", "the reweighting experiment has no problem '", name,
            "' (its problems: classifier", reweighter_ ? ", reweighter" : "", ")");
  return train_stream_->next();
}

}  // namespace reweighting
}  // namespace problems

MLO_REGISTER_EXPERIMENT(problems::reweighting::ReweightingExperiment);

}  // namespace mlo
