#pragma once
/// \file
/// Data-parallel communication on torch's own distributed engine (c10d): a rendezvous read from
/// the launcher's environment variables (mlo/dist/rendezvous.h), a rendezvous store, and a Gloo
/// (CPU) or NCCL (CUDA) process group, behind a small interface that keeps c10d's headers out of
/// mlo's.
///
/// ```
/// auto group = mlo::dist::ProcessGroup::connect(mlo::dist::Rendezvous::from_env());
/// group->broadcast(params);          // every rank starts from rank 0's values
/// group->all_reduce_mean(grads);     // one bucketed collective for the whole list
/// ```
///
/// Every collective waits at most `GroupOptions::timeout`: a rank that died or hangs makes the
/// others throw `mlo::Error` naming the collective, the rank and the timeout, never hang.

#include <mlo/dist/rendezvous.h>
#include <mlo/dist/strategy.h>

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace dist {

/// How to connect and how long any collective may wait.
struct GroupOptions {
  /// The collective backend; `connect` throws `mlo::Error` when this build or machine cannot
  /// run it.
  Backend backend = Backend::kGloo;
  /// Upper bound on the rendezvous and on each collective; past it the collective throws.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

/// A process group of `size()` ranks. Collectives are blocking and in place.
class ProcessGroup {
 public:
  /// Joins the group described by `where` through its rendezvous store
  /// (`Rendezvous::own_store_port` says whose). A stop request (SIGINT, SIGTERM under `mlo::Run`)
  /// ends the wait for the other ranks at once with `mlo::Interrupted`.
  static std::shared_ptr<ProcessGroup> connect(const Rendezvous& where,
                                               const GroupOptions& options = GroupOptions());
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's rank in the group.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }

  /// Replaces each tensor by its mean over the ranks. The tensors are packed into one flat
  /// buffer per dtype (one collective each), so many small gradients cost one round trip.
  void all_reduce_mean(const std::vector<torch::Tensor>& tensors);
  /// Replaces each tensor by its sum over the ranks (bucketed as above).
  void all_reduce_sum(const std::vector<torch::Tensor>& tensors);
  /// Gives `root` the mean over the ranks of each tensor (bucketed as above); the other ranks'
  /// tensors are left unspecified (ZeRO-2's reduce-scatter: only the owner keeps them).
  void reduce_mean(const std::vector<torch::Tensor>& tensors, int root);
  /// Copies `root`'s values into every rank's tensors (bucketed as above).
  void broadcast(const std::vector<torch::Tensor>& tensors, int root = 0);
  /// ZeRO-3's all-gather: `full` (size() x `shard`'s elements, contiguous, same dtype) receives
  /// every rank's `shard` in rank order.
  void all_gather(const torch::Tensor& shard, const torch::Tensor& full);
  /// ZeRO-3's reduce-scatter: `shard` receives rank()'s slice of the mean over the ranks of
  /// `full` (size() x `shard`'s elements). NCCL reduce-scatters; Gloo, which has no
  /// reduce-scatter, all-reduces `full` in place (its contents are then the sum) and slices: twice
  /// the traffic of a reduce-scatter.
  void reduce_scatter_mean(const torch::Tensor& full, const torch::Tensor& shard);
  /// Returns after every rank has called it.
  void barrier();

 private:
  struct Impl;
  ProcessGroup(std::unique_ptr<Impl> impl, int rank, int size);
  void all_reduce(const std::vector<torch::Tensor>& tensors, bool mean);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace dist
}  // namespace mlo
