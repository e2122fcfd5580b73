#pragma once
/// \file
/// The data of the `nas` experiments: a seeded subset of a dataset's training split, halved into
/// the split the network's weights train on and the held-out split the architecture (search)
/// or the validation (retraining) uses, and the whole test split. Images are standardized by the
/// training half's mean and deviation.

#include <mlo/base/fields.h>
#include <mlo/core/batch.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace mlo {
namespace problems {
namespace nas {

/// `data:` of the `nas` experiments.
struct NasDataConfig {
  std::string dataset = "fashion_mnist";
  std::string root;       ///< "": the dataset's default folder
  bool download = false;  ///< fetch missing files
  int64_t train_size = 10000;  ///< training images used: half train, half held out
  int64_t batch_size = 64;
  /// The `data:` keys.
  void visit(Fields& fields);
};

/// The loaded splits (on the CPU, float, standardized).
struct NasData {
  Batch train;
  Batch held_out;
  Batch test;
  int64_t in_channels = 1;
  int64_t classes = 10;
  std::string description;
  bool synthetic = false;
};

/// Loads `config.dataset`; the subset is drawn with `seed`. Throws `mlo::Error` naming
/// `data.train_size` when the split holds fewer images.
NasData load_nas_data(const NasDataConfig& config, uint64_t seed);

/// (mean cross-entropy, accuracy) of `logits_of` on `batch`, in chunks of `chunk` images moved
/// to `device`, without gradients.
std::pair<double, double> loss_and_accuracy(const std::function<at::Tensor(const at::Tensor&)>& logits_of,
                                            const Batch& batch, const c10::Device& device,
                                            int64_t chunk = 500);

}  // namespace nas
}  // namespace problems
}  // namespace mlo
