#pragma once
/// \file
/// `LoaderStream`: endless, seeded, resumable mini-batches over an in-memory dataset.

#include <mlo/core/batch.h>
#include <mlo/data/sampler.h>
#include <mlo/data/transforms.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace mlo {
namespace data {

/// Which part of each global batch this process reads under data parallelism: rank `rank` of
/// `world_size` takes the contiguous slice [rank * B / world_size, (rank + 1) * B / world_size)
/// of every global batch of B samples. The default (0 of 1) is the whole batch.
struct Shard {
  /// This process's rank, 0 .. `world_size` - 1.
  int64_t rank = 0;
  /// The number of ranks the batches are split over (>= 1).
  int64_t world_size = 1;
};

/// The rows [begin, end) of a global batch of `batch_size` rows that `shard` reads. Throws
/// `mlo::Error` when `batch_size` is not a multiple of `shard.world_size` (naming both) or the
/// shard is malformed.
std::pair<int64_t, int64_t> shard_range(int64_t batch_size, const Shard& shard);

/// `shard`'s slice of `batch` (rows `shard_range(batch.size(), shard)`): for full-batch
/// problems, whose one batch is the global batch.
Batch shard_batch(const Batch& batch, const Shard& shard);

/// Batch size, seed and epoch handling of a `LoaderStream`.
/// Example: `LoaderOptions(/*batch_size=*/100).seed(1).drop_last(true)`; under data parallelism
/// `.shard({rank, world_size})`.
struct LoaderOptions {
  /// Batches of `batch_size` samples, other options at their defaults.
  explicit LoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}
  /// Samples per (global) batch, >= 1 (the stream's constructor checks it).
  TORCH_ARG(int64_t, batch_size);
  /// Seeds the order of every epoch and the randomness of the transform.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Reshuffle every epoch (false: samples in order).
  TORCH_ARG(bool, shuffle) = true;
  /// Skip the last, smaller batch of an epoch (every batch then has exactly batch_size samples).
  TORCH_ARG(bool, drop_last) = false;
  /// This process's slice of every batch (data parallelism); `batch_size` stays the GLOBAL
  /// batch size and must be a multiple of `world_size`.
  TORCH_ARG(Shard, shard) = Shard{};
  /// Return every batch in page-locked host memory, so that its copy to a GPU does not block
  /// (set it when the problem lives on CUDA; needs a CUDA build of LibTorch).
  TORCH_ARG(bool, pin_memory) = false;
};

/// Endless mini-batches: epoch after epoch over (images, targets), each epoch in a fresh seeded
/// order (`SeededSampler`), with an optional batch transform (augmentation, normalization).
///
/// `Batch::data` is float (uint8 images are scaled to [0, 1] before the transform), and
/// `Batch::target` int64. Batch b of epoch e is a pure function of (seed, e, b): its indices
/// come from the epoch's permutation, and the transform gets a generator seeded with
/// (seed, e, b). So `save` only writes the position (epoch, offset, seed), and after `load` the
/// stream continues with exactly the batches an uninterrupted run would have drawn.
///
/// Sharding (`LoaderOptions::shard`): the sampler walks exactly the positions of a 1-process
/// stream (the global batches), and each rank gathers only its contiguous slice of each, so the
/// ranks' slices together are the 1-process batch, and the saved position does not depend on
/// the world size: a run saved by N processes resumes on M. A smaller last batch could not be
/// split evenly, so a sharded stream over a dataset whose size is not a multiple of the batch
/// size needs `drop_last(true)` (else the constructor throws). With a transform, rank r's
/// generator is seeded with (seed, e, b, r) for world_size > 1: augmentations then differ
/// from a 1-process run's (the samples do not).
///
/// NOTE: batches are gathered on the calling thread rather than by DataLoader workers: the data
/// is in memory, a gather plus a batch transform costs little next to a training step, and no
/// prefetched batch can run ahead of the saved position.
///
/// Example:
/// ```
/// mlo::data::Cifar10 cifar(mlo::data::Cifar10Options("data"));
/// auto train = mlo::data::make_stream(cifar, mlo::data::LoaderOptions(128).seed(1),
///     mlo::data::make_transform(mlo::data::TransformOptions::cifar10(/*train=*/true)));
/// problem->data(train);
/// ```
class LoaderStream : public BatchStream {
 public:
  /// `images`: N x ... (uint8 or float); `targets`: N labels. Both stay in memory.
  LoaderStream(at::Tensor images, at::Tensor targets, LoaderOptions options,
               Transform transform = {});

  Batch next() override;
  /// Writes size, seed, shuffle, epoch and offset.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Restores a position written by `save` (the dataset must have the same size).
  void load(torch::serialize::InputArchive& archive) override;

  /// Epoch of the last batch returned (-1 before the first).
  int64_t epoch() const { return sampler_.epoch(); }
  /// Batches per epoch (the last one smaller unless `drop_last`).
  int64_t batches_per_epoch() const;
  /// Rows of each batch this stream returns (the global batch size / world size).
  int64_t local_batch_size() const { return options_.batch_size() / options_.shard().world_size; }
  /// Number of samples.
  int64_t size() const { return images_.size(0); }
  /// The options the stream was built with.
  const LoaderOptions& options() const { return options_; }

 private:
  at::Tensor images_;
  at::Tensor targets_;
  LoaderOptions options_;
  Transform transform_;
  SeededSampler sampler_;
};

/// A `LoaderStream` over any dataset with `images()` and `targets()` (`Cifar10`, `FashionMnist`,
/// `SyntheticCifar`, `Subset`).
template <typename Dataset>
std::shared_ptr<LoaderStream> make_stream(const Dataset& dataset, LoaderOptions options,
                                          Transform transform = {}) {
  return std::make_shared<LoaderStream>(dataset.images(), dataset.targets(), options,
                                        std::move(transform));
}

}  // namespace data
}  // namespace mlo
