#pragma once
// ZeRO-3 parameter sharding of one level whose model is an nn::Chain (internal to the library, used by the core's level runtime;
// docs/distributed.md, "zero3").
//
// Each block of the chain with trainable parameters is a unit. Per unit and optimizer parameter
// group, the parameters are laid end to end in one flat vector, padded with zeros to a multiple
// of the ranks; rank r keeps slice r of it (its shard: a leaf tensor, the level's trainable
// tensor from then on, stepped by the optimizer in place of the parameters). The module's own
// parameters hold no values between uses: the chain's block runner gathers a unit's shards into
// them around the block's forward and again around its backward, and frees them after each.
//
// The gradient link from the shards to the loss is `UnitFunction` (zero3.cpp): its forward keeps
// the block's own graph (activations as usual, parameters freed); its backward regathers the
// parameters, differentiates that graph and reduce-scatters the parameters' gradient, so a
// shard's gradient is the mean over the ranks: the global batch's, as data parallelism averages
// them. Second derivatives through a unit are refused (its backward is not differentiable).

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace mlo {
namespace dist {
class ProcessGroup;
}  // namespace dist
namespace nn {
class ChainImpl;
}  // namespace nn

namespace detail {

class Zero3 {
 public:
  // Shards the trainable parameters of `chain` (the values now in them, equal on every rank)
  // over `group`, as `optimizer` groups them; replaces the optimizer's parameters by the shards
  // (its state must be empty: it is created for the shards) and installs the chain's block
  // runner. `owner` names the problem in errors. `offload`: the shards (hence their gradients
  // and optimizer state) live in host memory, pinned, and each gather first copies a unit's
  // shard to the parameters' device; its gradient comes back to the host.
  Zero3(nn::ChainImpl& chain, torch::optim::Optimizer* optimizer,
        std::shared_ptr<dist::ProcessGroup> group, std::string owner, bool offload = false);
  // Uninstalls the runner. (The module's parameters stay empty: the values are in the shards.)
  ~Zero3();
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  // The group the shards are spread over (kept alive by this and by the chain's runner).
  dist::ProcessGroup& group() const { return *group_; }
  // This rank's shards, unit by unit (then by parameter group): the level's trainable tensors.
  const std::vector<at::Tensor>& shards() const { return shards_; }
  // "shard 1 of 2 of block 'layer1.0' (conv1.weight, bn1.weight, ...)", or "" if `tensor` is
  // none of the shards.
  std::string describe(const at::Tensor& tensor) const;
  // Copies of the sharded parameters' values (gathered one unit at a time; collective), keyed by
  // the parameters' TensorImpls.
  std::vector<std::pair<const void*, at::Tensor>> gather_copies() const;
  // Time spent in this level's all-gathers and reduce-scatters, and their count, since
  // construction (wall seconds of the calling thread: the collectives block).
  struct Traffic {
    int64_t gathers = 0;
    int64_t reduce_scatters = 0;
    double gather_seconds = 0;
    double reduce_scatter_seconds = 0;
  };
  const Traffic& traffic() const { return *traffic_; }
  // Bytes of every shard of this rank (parameters held between steps).
  int64_t shard_bytes() const;
  // Whether `chain`'s parameters are sharded by some Zero3 now.
  static bool installed(const nn::ChainImpl& chain);

  struct Flat;
  struct Unit;
  class Runner;

 private:
  nn::ChainImpl& chain_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::string owner_;
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<at::Tensor> shards_;
  std::shared_ptr<Traffic> traffic_;
  std::shared_ptr<Runner> runner_;
};

}  // namespace detail
}  // namespace mlo
