#pragma once
/// \file
/// `Batch`, what `Problem::training_step` receives, and `BatchStream`, the endless source a
/// problem draws its batches from.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {

/// One mini-batch: inputs and targets (either may be undefined, e.g. for a problem without data).
struct Batch {
  /// An empty batch: both tensors undefined.
  Batch() = default;
  /// A batch of `data` with `target` (undefined when not given).
  Batch(at::Tensor data, at::Tensor target = {})
      : data(std::move(data)), target(std::move(target)) {}

  /// The inputs; samples along the first dimension.
  at::Tensor data;
  /// The targets (labels), or undefined.
  at::Tensor target;

  /// Number of samples (first dimension of `data`), 0 when there is no data.
  int64_t size() const { return data.defined() && data.dim() > 0 ? data.size(0) : 0; }
  /// This batch on `device` (itself when both tensors are there already). A copy from pinned
  /// host memory to a GPU does not wait for the copy to finish (`non_blocking`); the GPU's
  /// stream orders it before the kernels that read it.
  Batch to(const c10::Device& device) const;
};

/// An endless source of batches. Implementations restart (reshuffle) at the end of an epoch.
class BatchStream {
 public:
  virtual ~BatchStream() = default;
  /// The next batch.
  virtual Batch next() = 0;
  /// Writes the position in the stream, so a resumed run continues with the same batches.
  virtual void save(torch::serialize::OutputArchive& archive) const;
  /// Restores a position written by `save`.
  virtual void load(torch::serialize::InputArchive& archive);
};

/// Cycles through a fixed list of batches, in order. Example: `VectorStream({full_batch})`.
class VectorStream : public BatchStream {
 public:
  /// Cycles through `batches`; throws `mlo::Error` when it is empty.
  explicit VectorStream(std::vector<Batch> batches);
  Batch next() override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  std::vector<Batch> batches_;
  int64_t position_ = 0;
};

/// Calls a function for every batch (a generator, a DataLoader iterator wrapper, ...).
class FunctionStream : public BatchStream {
 public:
  /// Calls `fn` for each batch; throws `mlo::Error` when it is empty.
  explicit FunctionStream(std::function<Batch()> fn);
  Batch next() override;

 private:
  std::function<Batch()> fn_;
};

}  // namespace mlo
