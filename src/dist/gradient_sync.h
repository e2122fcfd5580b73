#pragma once
// Internal to src/dist (not installed; core's runtime of a level uses it): how one level keeps its
// data-parallel replicas consistent
// (docs/distributed.md). One interface, one implementation per strategy, chosen once per level
// at engine initialization by `make_gradient_sync` (the one place that decides what a level
// does under the engine's strategy):
//   none         one process, or a level every rank computes alike: nothing to do;
//   replicas     a level that opted out of data parallelism under a distributed engine: every
//                rank computes it on the same full batches, and its parameters and buffers
//                follow rank 0's after each step (kernels that are not deterministic would
//                otherwise let the replicas drift);
//   distributed  the mean of the gradients over the ranks at each accumulation boundary;
//   zero1        the same, and each rank steps (and keeps the optimizer state of) the parameters
//                it owns, which it then broadcasts;
//   zero2        zero1, with each micro-step's gradients reduce-scattered to their owners;
//   zero3        the parameters of an nn::Chain sharded (zero3.h): each shard's gradient arrives
//                averaged from its unit's backward. (zero3 on another model is zero2.)
//
// NOTE: ZeRO-1/2 shard by whole parameters, not by flat slices: each trainable parameter has one
// owning rank (a greedy balance of element counts), the only rank that keeps its optimizer
// state and steps it. Optimizers that create their state lazily (SGD's momentum, Adam's
// moments) then hold state for the owned parameters only. Parameter granularity keeps every
// LibTorch optimizer usable unchanged, at the price of a coarser balance for models with a few
// huge tensors.

#include <mlo/dist/strategy.h>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace dist {
class ProcessGroup;
}  // namespace dist

namespace detail {

class Zero3;

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // "none", "replicas", "distributed", "zero1", "zero2", "zero3".
  virtual const char* name() const = 0;
  // The group the level averages over (null: it does not).
  virtual dist::ProcessGroup* group() const { return nullptr; }
  // Whether the level's trainable tensors are this rank's parameter shards (zero3).
  virtual bool shards_parameters() const { return false; }

  // ---- The level's own steps. ----
  // Each micro-step's gradients, before they accumulate (zero2: to their owners; the others'
  // entries become undefined).
  virtual void micro_step(std::vector<at::Tensor>& grads) const { (void)grads; }
  // At the accumulation boundary, before unscaling: the window's gradients made the global
  // batch's (distributed, zero1: their mean over the ranks).
  virtual void window_end(const std::vector<at::Tensor>& grads) const { (void)grads; }
  // Whether the (unscaled) gradients are finite everywhere, given this rank's answer (sharded
  // gradients: every rank sees its own).
  virtual bool all_finite(bool local) const { return local; }
  // Clips the global L2 norm of the gradients of `params` to `max_norm`.
  virtual void clip(const std::vector<at::Tensor>& params, double max_norm) const;
  // Before the optimizer step (zero1/zero2: the gradients of parameters other ranks own go, so
  // the optimizer skips them and never creates their state).
  virtual void before_step(const std::vector<at::Tensor>& params) const { (void)params; }
  // After it: the parameters and buffers every rank must share.
  virtual void after_step(const std::vector<at::Tensor>& params,
                          const std::vector<at::Tensor>& buffers) const {
    (void)params;
    (void)buffers;
  }

  // ---- What hypergradient methods ask of the level (mlo::Level). ----
  // The mean over the ranks of quantities computed from this level's loss on its local shard
  // of the batch (nothing when the level does not average).
  virtual void mean(const std::vector<at::Tensor>& tensors) const { (void)tensors; }
  // Whether `v`, a vector over this level's trainable tensors, is finite on every rank (each
  // holds a slice of a vector over sharded parameters).
  virtual bool finite_everywhere(bool local) const { return local; }
  // The sum over the ranks of `local`, a sum over this level's trainable tensors (a dot
  // product), where each rank holds a slice of them.
  virtual double sum_over_shards(double local) const { return local; }
  // A line on where zero3's time goes, or "".
  virtual std::string summary(const std::string& owner) const {
    (void)owner;
    return "";
  }
};

// What of a level its synchronization is made for: the problem's name (for errors), module
// (null: none) and optimizer, its trainable tensors (resolved: listed, on `device`), and whether
// zero3 keeps its parameter shards in host memory (ProblemConfig::offload).
struct SyncedLevel {
  const std::string& name;
  torch::nn::Module* module;
  torch::optim::Optimizer* optimizer;
  std::vector<at::Tensor>& trainable;
  c10::Device device;
  bool offload;
};

// The synchronization of `level` under `strategy` over `group` (null: one process).
// `data_parallel`: the level takes part (ProblemConfig::data_parallel). Under zero3 a level
// whose module is an nn::Chain has its parameters sharded: `zero3` (the problem's own, kept
// across engines) is made here the first time; `level.trainable` then becomes this rank's
// shards.
std::unique_ptr<GradientSync> make_gradient_sync(
    const std::shared_ptr<dist::ProcessGroup>& group, dist::Strategy strategy, bool data_parallel,
    const SyncedLevel& level, std::unique_ptr<Zero3>& zero3);

}  // namespace detail
}  // namespace mlo
