#include <mlo/base/error.h>
#include <mlo/data/subset.h>

#include <torch/torch.h>

namespace mlo {
namespace data {

Subset::Subset(const torch::Tensor& images, const torch::Tensor& targets, torch::Tensor indices,
               std::string name)
    : indices_(std::move(indices)), name_(std::move(name)) {
  MLO_CHECK(images.defined() && targets.defined() && images.dim() >= 1 && targets.dim() >= 1 &&
                images.size(0) == targets.size(0),
            "Subset of '", name_, "': images and targets must have the same first dimension");
  MLO_CHECK(indices_.defined() && indices_.dim() == 1 && indices_.scalar_type() == torch::kLong,
            "Subset of '", name_, "': indices must be a 1-D int64 tensor");
  if (indices_.numel() > 0) {
    const auto lo = indices_.min().item<int64_t>(), hi = indices_.max().item<int64_t>();
    MLO_CHECK(lo >= 0 && hi < images.size(0), "Subset of '", name_, "': index ", lo < 0 ? lo : hi,
              " out of range (", images.size(0), " samples)");
  }
  images_ = images.index_select(0, indices_);
  targets_ = targets.index_select(0, indices_);
}

torch::data::Example<> Subset::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  MLO_CHECK(i < images_.size(0), "Subset of '", name_, "': index ", i, " out of range (",
            images_.size(0), " samples)");
  return {images_[i], targets_[i]};
}

torch::optional<size_t> Subset::size() const { return static_cast<size_t>(images_.size(0)); }

}  // namespace data
}  // namespace mlo
