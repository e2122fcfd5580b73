#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/data/sampler.h>

#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

namespace mlo {
namespace data {
namespace {

constexpr const char* kOwner = "data sampler";

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}


}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

SeededSampler::SeededSampler(size_t size, uint64_t seed, bool shuffle)
    : size_(size), seed_(seed), shuffle_(shuffle) {}

void SeededSampler::reset(torch::optional<size_t> new_size) {
  if (new_size) size_ = *new_size;
  set_position(epoch_ + 1, 0);
}

torch::optional<std::vector<size_t>> SeededSampler::next(size_t batch_size) {
  if (epoch_ < 0) reset();
  if (offset_ >= size_ || batch_size == 0) return torch::nullopt;
  const size_t end = std::min(size_, offset_ + batch_size);
  std::vector<size_t> batch(order_.begin() + static_cast<std::ptrdiff_t>(offset_),
                            order_.begin() + static_cast<std::ptrdiff_t>(end));
  offset_ = end;
  return batch;
}

void SeededSampler::set_position(int64_t epoch, size_t offset) {
  MLO_CHECK(epoch >= 0 && offset <= size_, "data stream: invalid position (epoch ", epoch,
            ", offset ", offset, " of ", size_, ")");
  if (epoch != epoch_ || order_.size() != size_) {
    epoch_ = epoch;
    make_order();
  }
  offset_ = offset;
}

void SeededSampler::make_order() {
  order_.resize(size_);
  if (!shuffle_) {
    for (size_t i = 0; i < size_; ++i) order_[i] = i;
    return;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(
      mix_seed(seed_, static_cast<uint64_t>(epoch_), /*b=*/0x5A3D));
  const auto perm = torch::randperm(static_cast<int64_t>(size_), gen, torch::kLong);
  const auto* p = perm.data_ptr<int64_t>();
  for (size_t i = 0; i < size_; ++i) order_[i] = static_cast<size_t>(p[i]);
}

void SeededSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("size", c10::IValue(static_cast<int64_t>(size_)));
  archive.write("seed", c10::IValue(static_cast<int64_t>(seed_)));
  archive.write("shuffle", c10::IValue(shuffle_));
  archive.write("epoch", c10::IValue(epoch_));
  archive.write("offset", c10::IValue(static_cast<int64_t>(offset_)));
}

void SeededSampler::load(torch::serialize::InputArchive& archive) {
  const int64_t size = mlo::archive::read_int(archive, "size", kOwner);
  MLO_CHECK(size == static_cast<int64_t>(size_), "data stream state: saved for ", size,
            " samples, this dataset has ", size_);
  seed_ = static_cast<uint64_t>(mlo::archive::read_int(archive, "seed", kOwner));
  shuffle_ = mlo::archive::read_bool(archive, "shuffle", kOwner);
  const int64_t epoch = mlo::archive::read_int(archive, "epoch", kOwner);
  const int64_t offset = mlo::archive::read_int(archive, "offset", kOwner);
  order_.clear();  // the seed may have changed: rebuild the order
  if (epoch < 0) {
    epoch_ = -1;
    offset_ = 0;
    return;
  }
  set_position(epoch, static_cast<size_t>(offset));
}

}  // namespace data
}  // namespace mlo
