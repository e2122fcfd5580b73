#include <mlo/base/error.h>
#include <mlo/data/sampler.h>
#include <mlo/data/synthetic.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

namespace mlo {
namespace data {
namespace {

// The stream id of the class prototypes in `mix_seed`.
constexpr uint64_t kPrototypeStream = 0x70726f746fULL;

}  // namespace

SyntheticCifar::SyntheticCifar(SyntheticOptions options) : options_(std::move(options)) {
  std::vector<int64_t> counts = options_.class_counts();
  if (counts.empty()) {
    const int64_t c = options_.num_classes(), n = options_.size();
    MLO_CHECK(c >= 1, "synthetic data: num_classes must be >= 1, got ", c);
    MLO_CHECK(n >= 0, "synthetic data: size must be >= 0, got ", n);
    for (int64_t k = 0; k < c; ++k) counts.push_back(n / c + (k < n % c ? 1 : 0));
  }
  num_classes_ = static_cast<int64_t>(counts.size());
  int64_t total = 0;
  for (auto count : counts) {
    MLO_CHECK(count >= 0, "synthetic data: class_counts must be >= 0, got ", count);
    total += count;
  }
  const auto& shape = options_.shape();
  MLO_CHECK(shape.size() == 3 && shape[0] > 0 && shape[1] > 0 && shape[2] > 0,
            "synthetic data: shape must be 3 positive sizes (C, H, W), got ",
            c10::IntArrayRef(shape));

  auto gen = at::make_generator<at::CPUGeneratorImpl>(options_.seed());
  // NOTE: the prototypes' generator starts from the task seed mixed with a stream id. Seeded with
  // the task seed itself it would repeat the sample generator's draws (same seed), so the noise
  // of the first images would be a shifted copy of the prototypes.
  const uint64_t task = options_.prototype_seed().value_or(options_.seed());
  auto prototype_gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(task, kPrototypeStream));
  std::vector<torch::Tensor> blocks;
  for (int64_t k = 0; k < num_classes_; ++k)
    blocks.push_back(torch::full({counts[k]}, k, torch::kLong));
  auto labels = torch::cat(blocks);
  targets_ = labels.index_select(0, torch::randperm(total, gen, torch::kLong));

  std::vector<int64_t> proto_shape = {num_classes_};
  proto_shape.insert(proto_shape.end(), shape.begin(), shape.end());
  const auto prototypes = torch::rand(proto_shape, prototype_gen);
  std::vector<int64_t> image_shape = {total};
  image_shape.insert(image_shape.end(), shape.begin(), shape.end());
  images_ = torch::empty(image_shape, torch::kUInt8);
  // NOTE: in chunks, so that 50000 images never need their float form all at once.
  constexpr int64_t kChunk = 4096;
  for (int64_t begin = 0; begin < total; begin += kChunk) {
    const int64_t len = std::min(kChunk, total - begin);
    std::vector<int64_t> chunk_shape = image_shape;
    chunk_shape[0] = len;
    auto noise = torch::rand(chunk_shape, gen);
    auto mixed = prototypes.index_select(0, targets_.narrow(0, begin, len)).add_(noise).mul_(127.5);
    images_.narrow(0, begin, len).copy_(mixed.round_().clamp_(0, 255));
  }
  spdlog::info("data: synthetic CIFAR-shaped data ({} images, {} classes, seed {}, prototype "
               "seed {}), not real data",
               total, num_classes_, options_.seed(), task);
}

torch::data::Example<> SyntheticCifar::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  MLO_CHECK(i < images_.size(0), "synthetic data: index ", i, " out of range (", images_.size(0),
            " images)");
  return {images_[i], targets_[i]};
}

torch::optional<size_t> SyntheticCifar::size() const {
  return static_cast<size_t>(images_.size(0));
}

}  // namespace data
}  // namespace mlo
