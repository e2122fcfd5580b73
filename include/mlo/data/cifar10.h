#pragma once
/// \file
/// `Cifar10`: the CIFAR-10 binary version (`cifar-10-batches-bin`), read fully into memory.

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

/// The official address of CIFAR-10's binary version (the archive `cifar-10-batches-bin/`
/// unpacks from; its published MD5 is c32a1d4ab5d03f1284b67883e8d87530).
inline constexpr const char* kCifar10Url =
    "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";

/// Where and how to read CIFAR-10. Example: `Cifar10Options("data/cifar10").split(Split::kTest)`.
struct Cifar10Options {
  /// `root` holds the binary batches, directly or in its `cifar-10-batches-bin` subfolder.
  explicit Cifar10Options(std::string root) : root_(std::move(root)) {}
  /// The folder given at construction.
  TORCH_ARG(std::string, root);
  /// Train: `data_batch_1.bin` .. `data_batch_5.bin` (50000 images); test: `test_batch.bin`
  /// (10000).
  TORCH_ARG(Split, split) = Split::kTrain;
  /// Store images as float in [0, 1] (4x the memory) instead of uint8.
  TORCH_ARG(bool, to_float) = false;
};

/// CIFAR-10, binary version: every record is 1 label byte (0..9) and 3072 pixel bytes
/// (3x32x32, channel-major: 1024 red, 1024 green, 1024 blue, each row by row).
///
/// Images are an N x 3 x 32 x 32 tensor (uint8, or float in [0, 1] with `to_float`), targets
/// int64 of size N. Missing or malformed files throw `mlo::Error` naming the file, what is wrong,
/// and where to put the data.
///
/// Example:
/// ```
/// mlo::data::Cifar10 train(mlo::data::Cifar10Options("data"));
/// auto loader = torch::data::make_data_loader(
///     train.map(torch::data::transforms::Stack<>()), /*batch_size=*/128);
/// ```
class Cifar10 : public torch::data::datasets::Dataset<Cifar10> {
 public:
  /// Classes, labelled 0..9.
  static constexpr int64_t kNumClasses = 10;
  /// Bytes of one record: 1 label byte and 3072 pixel bytes.
  static constexpr int64_t kRecordBytes = 1 + 3 * 32 * 32;

  /// Reads every file of the split into memory; throws `mlo::Error` for a missing file
  /// (saying where to download the data) or a malformed one.
  explicit Cifar10(Cifar10Options options);

  /// Image `index` (3 x 32 x 32, stored dtype) and its label (int64 scalar).
  torch::data::Example<> get(size_t index) override;
  /// The number of images (always known).
  torch::optional<size_t> size() const override;

  /// All images, N x 3 x 32 x 32.
  const torch::Tensor& images() const { return images_; }
  /// All labels, int64, size N.
  const torch::Tensor& targets() const { return targets_; }
  /// The folder the batches were read from.
  const std::string& folder() const { return folder_; }
  /// "cifar10", for logs and reports.
  const char* name() const { return "cifar10"; }
  /// Always false: these are the real images.
  bool is_synthetic() const { return false; }
  /// Names of the 10 classes, by label ("airplane", "automobile", ...).
  static const std::vector<std::string>& class_names();

  /// Reads one binary batch file: images N x 3 x 32 x 32 (uint8), labels int64.
  static std::pair<torch::Tensor, torch::Tensor> read_batch(const std::string& path);

 private:
  Cifar10Options options_;
  std::string folder_;
  torch::Tensor images_;
  torch::Tensor targets_;
};

}  // namespace data
}  // namespace mlo
