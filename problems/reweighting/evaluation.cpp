// Evaluation and reports of the reweighting experiment.
#include "problems/reweighting/experiment.h"
#include "problems/reweighting/schemes/mwn.h"

#include <mlo/core/metrics.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/transforms.h>

#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace mlo {
namespace problems {
namespace reweighting {

std::vector<int64_t> ReweightingExperiment::valid_counts() const {
  return data::class_counts(valid_targets_, kClasses);
}

std::optional<std::string> ReweightingExperiment::missing_validation() const {
  if (settings_.data.valid_size > 0) return std::nullopt;
  return std::string("data.valid_size is 0");
}

Metrics ReweightingExperiment::evaluate(run::EvalSet set) {
  const at::Tensor& images = set == run::EvalSet::kValid ? valid_images_ : test_images_;
  const at::Tensor& targets = set == run::EvalSet::kValid ? valid_targets_ : test_targets_;
  const std::string prefix = set == run::EvalSet::kValid ? "valid/" : "";
  if (images.size(0) == 0) return {};  // no such split: no metrics (not zeros)
  torch::NoGradGuard no_grad;
  const bool was_training = classifier_->is_training();
  classifier_->eval();
  const auto normalize = data::make_transform(transform_options(dataset_, false));
  at::Generator generator = at::detail::createCPUGenerator(0);
  std::vector<int64_t> correct(kClasses, 0), total(kClasses, 0);
  double loss_sum = 0;
  const c10::Device device = classifier_->device();
  at::Tensor weight_sum = torch::zeros({kClasses}, at::TensorOptions(at::kDouble).device(device));
  const int64_t n = images.size(0);
  const int64_t batch = settings_.data.test_batch_size > 0 ? settings_.data.test_batch_size
                                                            : settings_.data.batch_size;
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t end = std::min(n, begin + batch);
    const at::Tensor x = normalize(images.slice(0, begin, end), generator).to(device);
    const at::Tensor y = targets.slice(0, begin, end).to(device);
    const at::Tensor logits = classifier_->logits(x).to(at::kFloat);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    if (reweighter_ && reweighter_->has_weight_net() && set == run::EvalSet::kValid) {
      // The weight net's view of the balanced validation set: per-class mean weight.
      // (on the losses the weight net reads in training: shifted by a logit adjustment)
      const auto* options = classifier_->weighting_as<WeightNetOptions>();
      const at::Tensor shift = options != nullptr ? options->logit_shift() : at::Tensor();
      const at::Tensor losses = torch::nn::functional::cross_entropy(
          shift.defined() ? logits + shift.to(logits.device(), logits.scalar_type()) : logits, y,
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      const at::Tensor w = reweighter_->weights(losses, y).to(at::kDouble);
      weight_sum.index_add_(0, y, w);
    }
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
    const std::string segment = metric_segment(class_names_[static_cast<size_t>(c)]);
    out[prefix + "acc/" + segment] = acc;
    if (reweighter_ && reweighter_->has_weight_net() && set == run::EvalSet::kValid) {
      out[prefix + "weight/" + segment] =
          weight_sum[c].item<double>() / static_cast<double>(total[c]);
    }
    balanced += acc;
    ++present;
  }
  out[prefix + "acc"] = all ? static_cast<double>(all_correct) / static_cast<double>(all) : 0.0;
  out[prefix + "balanced_acc"] = present ? balanced / static_cast<double>(present) : 0.0;
  // The 3 classes with the fewest training images (ties: the lower label).
  std::vector<int64_t> order(kClasses);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return split_counts_[static_cast<size_t>(a)] < split_counts_[static_cast<size_t>(b)];
  });
  double rare = 0;
  int64_t rare_n = 0;
  for (int64_t c : order) {
    if (rare_n == 3) break;
    if (total[c] == 0) continue;
    rare += static_cast<double>(correct[c]) / static_cast<double>(total[c]);
    ++rare_n;
  }
  if (has_rare_classes_) {
    out[prefix + "rare3_acc"] = rare_n ? rare / static_cast<double>(rare_n) : 0.0;
  }
  out[prefix + "loss"] = all ? loss_sum / static_cast<double>(all) : 0.0;
  return out;
}

std::string ReweightingExperiment::describe() const {
  std::ostringstream out;
  out << "data: " << dataset_name_ << "; " << (settings_.data.imbalance > 1 ? "long-tailed " : "")
      << "training set of " << train_images_.size(0)
      << " images (imbalance " << settings_.data.imbalance << "), balanced meta set of "
      << meta_images_.size(0) << ", balanced validation set of " << valid_images_.size(0)
      << " (held out of the training data; validation and early stopping), test set of "
      << test_images_.size(0) << " (final report only)\n";
  if (!noise_line_.empty()) out << noise_line_ << "\n";
  out << "training images per class:";
  for (size_t c = 0; c < train_counts_.size(); ++c) {
    out << " " << class_names_[c] << "=" << train_counts_[c];
  }
  const nn::ModelConfig classifier = settings_.model("classifier");  // (a copy: kept alive)
  const auto* cnn = classifier.options_as<nn::CnnModel>();
  out << "\nclassifier: " << classifier.name()
      << (cnn != nullptr && cnn->batch_norm ? " (batch norm)" : "");
  const Scheme& scheme = settings_.reweighting.scheme();
  if (reweighter_) {
    out << ", reweighter: " << scheme.describe()
        << " (hypergradient: " << config_.problems.at("classifier").config.method().name();
    if (const auto* keys = dynamic_cast<const WeightNetKeys*>(&scheme)) {
      out << (keys->normalize_weights ? ", normalized" : ", unnormalized")
          << (keys->freeze_weight_inputs ? ", frozen weight inputs" : "") << ", weight floor "
          << keys->weight_floor;
      if (keys->weight_floor > 0 && keys->weight_floor_after > 0) {
        out << " after step " << keys->weight_floor_after;
      }
      if (keys->logit_adjustment > 0) {
        out << ", on logit-adjusted losses (tau " << keys->logit_adjustment << ")";
      }
      if (keys->max_relative_weight > 0) {
        out << ", weights <= " << keys->max_relative_weight << " x mean";
      }
    }
    out << ")";
  } else if (scheme.weight_net() == WeightNet::kNone) {
    out << ", " << scheme.describe();
  } else {
    out << ", no reweighter (baseline)";
  }
  return out.str();
}

std::string ReweightingExperiment::report(const Metrics& test, const Metrics& valid) const {
  (void)valid;  // the runner logs the final validation accuracy
  std::ostringstream out;
  out << (synthetic_ ? "Test accuracy (SYNTHETIC data)\n" : "Test accuracy\n");
  char line[128];
  std::snprintf(line, sizeof(line), "%-14s %8s %10s\n", "class", "train n", "test acc");
  out << line;
  for (size_t c = 0; c < class_names_.size(); ++c) {
    const auto it = test.find("acc/" + metric_segment(class_names_[c]));
    std::snprintf(line, sizeof(line), "%-14s %8lld %10.4f\n", class_names_[c].c_str(),
                  static_cast<long long>(train_counts_[c]), it == test.end() ? 0.0 : it->second);
    out << line;
  }
  std::snprintf(line, sizeof(line), "%-14s %8s %10.4f\n%-14s %8s %10.4f\n", "overall", "",
                test.at("acc"), "balanced", "", test.at("balanced_acc"));
  out << line;
  if (const auto rare3 = test.find("rare3_acc"); rare3 != test.end()) {
    std::snprintf(line, sizeof(line), "%-14s %8s %10.4f\n", "rarest 3", "", rare3->second);
    out << line;
  }
  return out.str();
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
