#pragma once
/// \file
/// `SyntheticCifar`: deterministic CIFAR-shaped data for memory and speed work without a download.

#include <torch/arg.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace mlo {
namespace data {

/// Size, classes and seed of the synthetic data.
/// Example: `SyntheticOptions(5000).seed(3)`, or `SyntheticOptions().class_counts({500, 50, 5})`.
struct SyntheticOptions {
  /// `size` images, spread evenly over the classes (the first `size % num_classes` classes get
  /// one more). Ignored when `class_counts` is set.
  explicit SyntheticOptions(int64_t size = 50000) : size_(size) {}
  /// Number of images, >= 0 (ignored when `class_counts` is set).
  TORCH_ARG(int64_t, size);
  /// Number of classes, >= 1 (ignored when `class_counts` is set).
  TORCH_ARG(int64_t, num_classes) = 10;
  /// Images per class (its length sets the number of classes); empty: balanced over `size`.
  TORCH_ARG(std::vector<int64_t>, class_counts) = {};
  /// Seed of the labels' order and the noise: the sample.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Seed of the class prototypes: the task (unset: `seed`). Two sets with the same prototype
  /// seed are samples of one task (a training and a test split); with another, of unrelated
  /// tasks. The prototypes are drawn from a stream of their own, never from the sample's.
  TORCH_ARG(std::optional<uint64_t>, prototype_seed) = std::nullopt;
  /// Image shape, channels x height x width.
  TORCH_ARG(std::vector<int64_t>, shape) = std::vector<int64_t>{3, 32, 32};
};

/// Synthetic images shaped like CIFAR-10: always labelled `synthetic` (`name()`,
/// `is_synthetic()`), so no log or report mistakes it for real data.
///
/// Every class has a random prototype image (drawn with `prototype_seed`); an image is the mean of
/// its class prototype and uniform noise, quantized to uint8 (N x 3 x 32 x 32, like
/// `Cifar10::images()`). So the classes are learnable, a test set made with the training set's
/// prototype seed measures what was learnt, and the data is a pure function of the options (same
/// seeds, same bytes). Labels are in class blocks then shuffled with `seed`.
///
/// Example: `mlo::data::SyntheticCifar data(mlo::data::SyntheticOptions(1000).seed(1));`
class SyntheticCifar : public torch::data::datasets::Dataset<SyntheticCifar> {
 public:
  /// Draws every image and label at once; throws `mlo::Error` on a negative size or count,
  /// fewer than 1 class, or a shape that is not 3 positive sizes.
  explicit SyntheticCifar(SyntheticOptions options = SyntheticOptions());

  /// Image `index` (uint8, 3 x 32 x 32) and its label (int64 scalar).
  torch::data::Example<> get(size_t index) override;
  /// The number of images (always known).
  torch::optional<size_t> size() const override;

  /// All images, N x 3 x 32 x 32, uint8.
  const torch::Tensor& images() const { return images_; }
  /// All labels, int64, size N.
  const torch::Tensor& targets() const { return targets_; }
  /// Number of classes (`class_counts`' length when it is set).
  int64_t num_classes() const { return num_classes_; }
  /// "synthetic", for logs and reports.
  const char* name() const { return "synthetic"; }
  /// Always true.
  bool is_synthetic() const { return true; }

 private:
  SyntheticOptions options_;
  int64_t num_classes_ = 0;
  torch::Tensor images_;
  torch::Tensor targets_;
};

}  // namespace data
}  // namespace mlo
