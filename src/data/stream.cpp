#include <mlo/base/error.h>
#include <mlo/data/stream.h>

#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

namespace mlo {
namespace data {

std::pair<int64_t, int64_t> shard_range(int64_t batch_size, const Shard& shard) {
  MLO_CHECK(shard.world_size >= 1 && shard.rank >= 0 && shard.rank < shard.world_size,
            "data shard: rank ", shard.rank, " of world_size ", shard.world_size,
            " (need 0 <= rank < world_size)");
  MLO_CHECK(batch_size % shard.world_size == 0, "data shard: the global batch size ", batch_size,
            " is not a multiple of the world size ", shard.world_size,
            " (each rank reads batch_size / world_size samples); choose a batch size divisible "
            "by ",
            shard.world_size);
  const int64_t local = batch_size / shard.world_size;
  return {shard.rank * local, (shard.rank + 1) * local};
}

Batch shard_batch(const Batch& batch, const Shard& shard) {
  if (shard.world_size == 1) return batch;
  const auto [begin, end] = shard_range(batch.size(), shard);
  return Batch(batch.data.slice(0, begin, end), batch.target.slice(0, begin, end));
}

LoaderStream::LoaderStream(at::Tensor images, at::Tensor targets, LoaderOptions options,
                           Transform transform)
    : images_(std::move(images)),
      targets_(std::move(targets)),
      options_(options),
      transform_(std::move(transform)),
      sampler_(images_.defined() && images_.dim() > 0 ? static_cast<size_t>(images_.size(0)) : 0,
               options.seed(), options.shuffle()) {
  MLO_CHECK(images_.defined() && targets_.defined() && images_.dim() >= 1 && targets_.dim() >= 1 &&
                images_.size(0) == targets_.size(0),
            "data stream: images and targets must have the same first dimension");
  MLO_CHECK(images_.size(0) > 0, "data stream: the dataset is empty");
  MLO_CHECK(options_.batch_size() >= 1, "data stream: batch_size must be >= 1, got ",
            options_.batch_size());
  MLO_CHECK(!options_.drop_last() || options_.batch_size() <= images_.size(0),
            "data stream: batch_size ", options_.batch_size(), " with drop_last exceeds the ",
            images_.size(0), " samples");
  const Shard& shard = options_.shard();
  shard_range(options_.batch_size(), shard);  // checks the shard and the divisibility
  MLO_CHECK(
      shard.world_size == 1 || options_.drop_last() || images_.size(0) % options_.batch_size() == 0,
      "data stream: sharded over ", shard.world_size, " ranks, the last batch of each ", "epoch (",
      images_.size(0) % options_.batch_size(), " of ", images_.size(0),
      " samples) is smaller than batch_size ", options_.batch_size(),
      " and cannot be split evenly; set drop_last (or a batch size dividing the dataset)");
  if (targets_.scalar_type() != torch::kLong) targets_ = targets_.to(torch::kLong);
}

int64_t LoaderStream::batches_per_epoch() const {
  const int64_t n = size(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

Batch LoaderStream::next() {
  const auto batch_size = static_cast<size_t>(options_.batch_size());
  const size_t remaining = sampler_.epoch() < 0 ? 0 : sampler_.size() - sampler_.offset();
  if (remaining == 0 || (options_.drop_last() && remaining < batch_size)) sampler_.reset();
  const auto batch_index = static_cast<uint64_t>(sampler_.offset() / batch_size);
  const auto epoch = static_cast<uint64_t>(sampler_.epoch());
  const auto indices = sampler_.next(batch_size);
  MLO_INTERNAL_ASSERT(indices.has_value() && !indices->empty());

  // Under a shard, the sampler still walks the global batch; this rank gathers its slice.
  const Shard& shard = options_.shard();
  auto first = indices->begin(), last = indices->end();
  if (shard.world_size > 1) {
    const auto [begin, end] = shard_range(static_cast<int64_t>(indices->size()), shard);
    first = indices->begin() + begin;
    last = indices->begin() + end;
  }
  const auto index = torch::tensor(std::vector<int64_t>(first, last), torch::kLong);
  auto data = to_float(images_.index_select(0, index));
  if (transform_) {
    // NOTE: a fresh generator per batch, seeded with the batch's coordinates, so no RNG state
    // has to be saved for a resumed run to draw the same augmentations.
    // Under a shard each rank draws its own (seed, epoch, batch, rank) augmentations.
    uint64_t seed = mix_seed(sampler_.seed(), epoch, batch_index);
    if (shard.world_size > 1) {
      seed = mix_seed(seed, static_cast<uint64_t>(shard.rank),
                      static_cast<uint64_t>(shard.world_size));
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    data = transform_(data, gen);
  }
  at::Tensor target = targets_.index_select(0, index);
  if (options_.pin_memory()) {
    // Page-locked: the copy to the GPU (Batch::to) then runs without blocking this thread.
    data = data.pin_memory();
    target = target.pin_memory();
  }
  return Batch(data, target);
}

void LoaderStream::save(torch::serialize::OutputArchive& archive) const { sampler_.save(archive); }

void LoaderStream::load(torch::serialize::InputArchive& archive) { sampler_.load(archive); }

}  // namespace data
}  // namespace mlo
