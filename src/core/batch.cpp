#include <mlo/core/batch.h>
#include <mlo/base/archive.h>
#include <mlo/base/error.h>

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

namespace mlo {

namespace {

at::Tensor on_device(const at::Tensor& t, const c10::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  return t.to(device, /*non_blocking=*/t.is_pinned());
}

}  // namespace

Batch Batch::to(const c10::Device& device) const {
  return Batch(on_device(data, device), on_device(target, device));
}

void BatchStream::save(torch::serialize::OutputArchive& /*archive*/) const {}
void BatchStream::load(torch::serialize::InputArchive& /*archive*/) {}

VectorStream::VectorStream(std::vector<Batch> batches) : batches_(std::move(batches)) {
  MLO_CHECK(!batches_.empty(), "VectorStream: needs at least one batch");
}

Batch VectorStream::next() {
  const Batch& batch = batches_[static_cast<size_t>(position_)];
  position_ = (position_ + 1) % static_cast<int64_t>(batches_.size());
  return batch;
}

void VectorStream::save(torch::serialize::OutputArchive& archive) const {
  archive.write("position", c10::IValue(position_));
}

void VectorStream::load(torch::serialize::InputArchive& archive) {
  position_ = mlo::archive::read_int(archive, "position", "batch stream") %
              static_cast<int64_t>(batches_.size());
}

FunctionStream::FunctionStream(std::function<Batch()> fn) : fn_(std::move(fn)) {
  MLO_CHECK(static_cast<bool>(fn_), "FunctionStream: needs a callable");
}

Batch FunctionStream::next() { return fn_(); }

}  // namespace mlo
