#pragma once
/// \file
/// `FashionMnist`: Fashion-MNIST from its gzip-compressed IDX files, read through zlib.

#include <mlo/data/split.h>

#include <torch/arg.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace data {

/// Where and how to read Fashion-MNIST. Example: `FashionMnistOptions().split(Split::kTest)`.
struct FashionMnistOptions {
  /// Folder Debian's `dataset-fashion-mnist` package installs the files into.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";

  /// Reads from `root` (by default `kDefaultRoot`).
  explicit FashionMnistOptions(std::string root = kDefaultRoot) : root_(std::move(root)) {}
  /// Folder holding `train-images-idx3-ubyte.gz`, `train-labels-idx1-ubyte.gz`,
  /// `t10k-images-idx3-ubyte.gz` and `t10k-labels-idx1-ubyte.gz` (uncompressed copies without
  /// `.gz` are read too).
  TORCH_ARG(std::string, root);
  /// Train: 60000 images; test (`t10k-*`): 10000.
  TORCH_ARG(Split, split) = Split::kTrain;
  /// Store images as float in [0, 1] (4x the memory) instead of uint8.
  TORCH_ARG(bool, to_float) = false;
};

/// Fashion-MNIST: 28x28 grayscale images of clothing in 10 classes.
///
/// IDX format (big-endian int32 header): images start with magic 2051, count, rows, columns, then
/// one byte per pixel; labels start with magic 2049, count, then one byte per label. The reader
/// checks magic numbers, 28x28 dimensions, matching counts, truncation and labels < 10, and
/// throws `mlo::Error` naming the file otherwise.
///
/// Images are an N x 1 x 28 x 28 tensor (uint8, or float in [0, 1] with `to_float`), targets
/// int64 of size N.
///
/// Example: `mlo::data::FashionMnist test(mlo::data::FashionMnistOptions().split(Split::kTest));`
class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  /// Classes, labelled 0..9.
  static constexpr int64_t kNumClasses = 10;
  /// The magic number that starts an IDX image file.
  static constexpr int32_t kImagesMagic = 2051;
  /// The magic number that starts an IDX label file.
  static constexpr int32_t kLabelsMagic = 2049;

  /// Reads the split's image and label files into memory; throws `mlo::Error` for a missing
  /// file (saying where to get the data), a malformed one, or counts that do not match.
  explicit FashionMnist(FashionMnistOptions options = FashionMnistOptions());

  /// Image `index` (1 x 28 x 28, stored dtype) and its label (int64 scalar).
  torch::data::Example<> get(size_t index) override;
  /// The number of images (always known).
  torch::optional<size_t> size() const override;

  /// All images, N x 1 x 28 x 28.
  const torch::Tensor& images() const { return images_; }
  /// All labels, int64, size N.
  const torch::Tensor& targets() const { return targets_; }
  /// "fashion-mnist", for logs and reports.
  const char* name() const { return "fashion-mnist"; }
  /// Always false: these are the real images.
  bool is_synthetic() const { return false; }
  /// Names of the 10 classes, by label ("t-shirt/top", "trouser", ...).
  static const std::vector<std::string>& class_names();

  /// Reads an IDX image file (gzip or plain): N x 1 x 28 x 28, uint8.
  static torch::Tensor read_images(const std::string& path);
  /// Reads an IDX label file (gzip or plain): int64, size N.
  static torch::Tensor read_labels(const std::string& path);

 private:
  FashionMnistOptions options_;
  torch::Tensor images_;
  torch::Tensor targets_;
};

}  // namespace data
}  // namespace mlo
