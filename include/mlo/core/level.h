#pragma once
/// \file
/// `mlo::Level`: a problem as the engine runs it, which is how hypergradient methods see it.
/// The engine makes one level per problem when it initializes (`Engine::level`), with what it
/// resolved for the problem (device, loss scaler, trainable tensors, the data parallelism of
/// its strategy), and steps the problem through it. A method (`Hypergradient::apply(v, curr,
/// prev)`) receives the levels of a hop: it re-evaluates `curr`'s loss on the batches `curr`
/// stepped on, and asks the level to average what it computed over the ranks.

#include <mlo/core/batch.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <string>
#include <vector>

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace mlo {

class Problem;
struct ProblemConfig;
namespace memory {
class LossScaler;
}  // namespace memory

/// One problem as the engine runs it (see the file comment). Made by the engine only.
class Level {
 public:
  virtual ~Level() = default;
  Level(const Level&) = delete;
  Level& operator=(const Level&) = delete;

  /// The problem: its module, optimizer, config, its own code (a method may cast it to the
  /// type it serves).
  virtual Problem& problem() const = 0;
  /// The problem's name.
  const std::string& name() const;
  /// The problem's configuration.
  const ProblemConfig& config() const;
  /// The problem's optimizer.
  torch::optim::Optimizer& optimizer() const;
  /// Whether the problem declares its re-evaluated loss separable
  /// (`Problem::separable_reevaluation`, a hook the problem overrides).
  bool separable_reevaluation() const;

  /// The trainable tensors, listed at initialization: the module's parameters that require
  /// gradients or, when the level shards its parameters (zero3), this rank's shards of them (a
  /// gradient for them is then already the mean over the ranks, and a vector over them is this
  /// rank's slice of the global vector).
  virtual const std::vector<at::Tensor>& parameters() const = 0;
  /// The micro-batches of the latest accumulation window: the `gradient_accumulation` batches
  /// the latest optimizer step averaged (one batch without accumulation).
  virtual const std::vector<Batch>& batches() const = 0;
  /// The loss over the latest window, under the level's precision: the mean of
  /// `training_step(b)` over `batches()`, run as a re-evaluation (`LossCall::kReevaluation`).
  /// NOTE: its graph covers every micro-batch at once; methods that can take one at a time use
  /// `loss(micro)`.
  virtual at::Tensor loss() = 0;
  /// The share of micro-batch `micro` in `loss()`: `training_step(b_micro) / n` for a window of
  /// n batches (the gradients of all shares sum to the gradient of the mean).
  virtual at::Tensor loss(std::size_t micro) = 0;
  /// `training_step(batch)` under the level's precision, as a re-evaluation (e.g. batches a
  /// method replays).
  virtual at::Tensor loss(const Batch& batch) = 0;

  /// Under data parallelism, replaces each tensor by its mean over the ranks (one bucketed
  /// collective); otherwise does nothing. A quantity computed from this level's loss on the
  /// local shard of the batch becomes the global batch's.
  virtual void mean(const std::vector<at::Tensor>& tensors) const = 0;
  /// Makes `grads`, the gradient of this level's loss on its local batch with respect to
  /// `of.parameters()`, the global batch's: the mean over the ranks, unless `of` shards its
  /// parameters (their gradients are averaged as they are computed).
  virtual void mean_gradient(const std::vector<at::Tensor>& grads, const Level& of) const = 0;
  /// The sum over the ranks of `local`, a sum over this level's parameters (a dot product of
  /// two vectors over `parameters()`), when the level shards them; `local` otherwise.
  virtual double sum_over_shards(double local) const = 0;
  /// Whether the level's parameters are sharded over the ranks (zero3 on an `nn::Chain`).
  virtual bool shards_parameters() const = 0;
  /// The level's loss scaler, or null when loss scaling is off.
  virtual const memory::LossScaler* loss_scaler() const = 0;
  /// Where the level's module lives (batches are moved there before `training_step`).
  virtual c10::Device device() const = 0;
  /// The levels one hop further along this level's hypergradient paths (each once): the `prev`
  /// that its method's `apply` receives, whose parameters are lambda to the method. Known from
  /// engine initialization on (a method's step hooks may read them); empty for a level that is
  /// no hop.
  virtual const std::vector<Level*>& parents() const = 0;

 protected:
  Level() = default;
};

}  // namespace mlo
