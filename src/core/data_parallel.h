#pragma once
// One level's data parallelism (private to the core): its gradients averaged over the ranks and,
// under zero1/zero2, its optimizer state (and gradients) sharded by parameter. (A level under zero3
// whose model is not an nn::Chain is served as zero2 here; a Chain's parameters are sharded by
// src/core/zero3.h, and this class then averages nothing itself: it is built as `distributed`
// for the checks, clipping and buffers.)
//
// NOTE: ZeRO here shards by whole parameters, not by flat slices: each trainable parameter has
// one owning rank (a greedy balance of element counts), the only rank that keeps its optimizer
// state and steps it. Optimizers that create their state lazily (SGD's momentum, Adam's
// moments) then hold state for the owned parameters only; after the step each owner broadcasts
// its parameters (the all-gather). Parameter granularity keeps every LibTorch optimizer usable
// unchanged, at the price of a coarser balance for models with a few huge tensors.

#include <mlo/dist/strategy.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace mlo {
namespace dist {
class ProcessGroup;
}  // namespace dist

namespace detail {

class DataParallel {
 public:
  // `params`: the level's trainable parameters, in the order every call below uses.
  // `device`: where the flags and norms of the collectives live (the model's device: NCCL
  // reduces device tensors only; zero3's offloaded shards are in host memory).
  DataParallel(dist::ProcessGroup& group, dist::Strategy strategy,
               const std::vector<at::Tensor>& params, c10::Device device);

  dist::ProcessGroup& group() const { return group_; }
  // zero1, zero2 (and zero3): each rank steps (and keeps the optimizer state of) its own parameters.
  bool shards_optimizer() const;
  // zero2 (and zero3): each micro-step's gradients are reduce-scattered; a rank keeps its own.
  bool shards_gradients() const;
  // The rank owning each parameter (empty unless the optimizer is sharded).
  const std::vector<int>& owners() const { return owner_; }

  // zero2, every micro-step: each owner receives the mean over the ranks of its parameters'
  // gradients; the other entries of `grads` become undefined (freed).
  void reduce_scatter(std::vector<at::Tensor>& grads) const;
  // distributed and zero1, at the accumulation boundary: the mean over the ranks, in place.
  void all_reduce(const std::vector<at::Tensor>& grads) const;
  // Whether the gradients are finite on every rank (zero2: each rank sees only its shard).
  bool all_finite(bool local) const;
  // zero2: clips the global L2 norm of the sharded gradients to `max_norm` (the same rule as
  // torch::nn::utils::clip_grad_norm_, with the norm summed over the ranks).
  void clip(const std::vector<at::Tensor>& params, double max_norm) const;
  // zero1, before the optimizer step: drops the gradients of parameters other ranks own, so
  // the optimizer skips them (and never creates their state).
  void drop_unowned(const std::vector<at::Tensor>& params) const;
  // zero1/zero2, after the step: each owner broadcasts its parameters to every rank.
  void gather(const std::vector<at::Tensor>& params) const;
  // After the step: rank 0's buffers (batch-norm running statistics) on every rank.
  void sync_buffers(const std::vector<at::Tensor>& buffers) const;

 private:
  dist::ProcessGroup& group_;
  dist::Strategy strategy_;
  c10::Device device_;
  std::vector<int> owner_;
};

}  // namespace detail
}  // namespace mlo
