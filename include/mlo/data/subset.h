#pragma once
/// \file
/// `Subset`: the samples of an in-memory dataset selected by index (a long-tailed split's
/// training or meta set, a validation hold-out, ...).

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstddef>
#include <string>

namespace mlo {
namespace data {

/// A `torch::data` dataset over `images[indices]` and `targets[indices]`, gathered once.
/// Example: `Subset train_lt(cifar.images(), cifar.targets(), split.train_indices);`
class Subset : public torch::data::datasets::Dataset<Subset> {
 public:
  /// `indices`: int64, 1-D, each in 0 .. images.size(0)-1 (repeats allowed). `name` is the
  /// source's, for logs.
  Subset(const torch::Tensor& images, const torch::Tensor& targets, torch::Tensor indices,
         std::string name = "subset");

  /// Image `index` of the subset and its label.
  torch::data::Example<> get(size_t index) override;
  /// The number of selected samples (always known).
  torch::optional<size_t> size() const override;

  /// The selected images, in the order of `indices`.
  const torch::Tensor& images() const { return images_; }
  /// The selected labels.
  const torch::Tensor& targets() const { return targets_; }
  /// Positions of the selected samples in the source dataset.
  const torch::Tensor& indices() const { return indices_; }
  /// The name given at construction (the source's, for logs).
  const std::string& name() const { return name_; }

 private:
  torch::Tensor images_;
  torch::Tensor targets_;
  torch::Tensor indices_;
  std::string name_;
};

/// The samples `indices` of any dataset with `images()`, `targets()` and `name()` (`Cifar10`,
/// `FashionMnist`, `SyntheticCifar`, `Subset`).
/// Example: `auto meta = mlo::data::subset(cifar, split.meta_indices);`
template <typename Dataset>
Subset subset(const Dataset& dataset, torch::Tensor indices) {
  return Subset(dataset.images(), dataset.targets(), std::move(indices), dataset.name());
}

}  // namespace data
}  // namespace mlo
