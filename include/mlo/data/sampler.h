#pragma once
/// \file
/// `SeededSampler`: a `torch::data` sampler whose order is a pure function of (seed, epoch).

#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlo {
namespace data {

/// Visits 0 .. size-1 once per epoch, in the order of a permutation drawn from a generator seeded
/// with (seed, epoch), or in order with `shuffle = false`.
///
/// Unlike `torch::data::samplers::RandomSampler`, which draws from the global generator, the
/// order does not depend on anything else the program draws, and the position (epoch, offset)
/// is all `save`/`load` need. `reset()` starts the next epoch (the first call starts epoch 0), as
/// a `torch::data::DataLoader` calls it at the start of each pass.
///
/// Example:
/// ```
/// auto loader = torch::data::make_data_loader(dataset.map(torch::data::transforms::Stack<>()),
///     mlo::data::SeededSampler(*dataset.size(), /*seed=*/7), /*batch_size=*/64);
/// ```
class SeededSampler : public torch::data::samplers::Sampler<> {
 public:
  /// Samples `size` indices per epoch, in an order drawn from `seed` (in order without
  /// `shuffle`); no epoch starts until the first `reset` or `next`.
  explicit SeededSampler(size_t size, uint64_t seed = 0, bool shuffle = true);

  /// Starts the next epoch; `new_size` changes the number of samples.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  /// Up to `batch_size` next indices of the epoch; nullopt once the epoch is done.
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// Writes size, seed, shuffle, epoch and offset.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Restores what `save` wrote (the size must match the dataset's).
  void load(torch::serialize::InputArchive& archive) override;

  /// Current epoch, -1 before the first `reset`.
  int64_t epoch() const { return epoch_; }
  /// Samples already returned in this epoch.
  size_t offset() const { return offset_; }
  /// Indices per epoch.
  size_t size() const { return size_; }
  /// The seed the orders are drawn from.
  uint64_t seed() const { return seed_; }
  /// Moves to `epoch` at `offset` (what `load` does).
  void set_position(int64_t epoch, size_t offset);

 private:
  void make_order();

  size_t size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  size_t offset_ = 0;
  std::vector<size_t> order_;
};

/// Mixes a seed with stream coordinates into a new, well-spread 64-bit seed (SplitMix64 steps).
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace data
}  // namespace mlo
