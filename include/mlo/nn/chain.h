#pragma once
/// \file
/// `mlo::nn::Chain`: a model as an ordered chain of single-tensor blocks. Activation checkpointing
/// and its planner (memory/checkpoint.h, memory/planner.h) work block by block on a chain.

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace nn {

class ChainImpl;

/// How `Chain::forward` runs the whole chain when an executor is installed: given the chain and
/// the input, return the output of all blocks. Typically built by the checkpointing planner from
/// `forward_range` calls over segments, some of them wrapped in a checkpoint.
using ChainExecutor = std::function<torch::Tensor(ChainImpl& chain, const torch::Tensor& input)>;

/// Runs single blocks in place of `block(i).forward(x)` (ZeRO-3 parameter sharding installs one:
/// it gathers a block's parameters around the block's forward and backward). The runner also names
/// what a block's gradients flow to (`leaves`), which activation checkpointing differentiates.
class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  /// Block `i` of `chain` on `x`: the same values as `chain.block(i).forward(x)`.
  virtual torch::Tensor run(ChainImpl& chain, std::size_t i, const torch::Tensor& x) = 0;
  /// The tensors that block `i`'s parameter gradients reach through `run` (its parameters, or
  /// the shards they are gathered from).
  virtual std::vector<torch::Tensor> leaves(const ChainImpl& chain, std::size_t i) const = 0;
};

/// An ordered list of named blocks, each a module with a non-templated `Tensor forward(Tensor)`;
/// `forward(x)` runs them in order.
///
/// Every block is a registered submodule, so `parameters()`, `named_parameters()`, `buffers()`,
/// `train()`/`eval()`, `to()` and serialization of the chain cover all blocks, in block order.
/// A dotted block name ("layer1.0") registers the block under a group submodule ("layer1"), so
/// parameter names read like torchvision's ("layer1.0.conv1.weight"); the blocks of one group
/// must be contiguous so that parameter order stays block order.
///
/// `forward_range(x, i, j)` runs blocks [i, j) and is what activation checkpointing wraps;
/// `set_executor` lets a planner change how `forward` runs the chain without changing the model,
/// and `set_block_runner` how each block runs (ZeRO-3 gathers its parameters around it).
///
/// ```
/// mlo::nn::Chain chain;
/// chain->push_back("stem", torch::nn::Linear(4, 8))
///      .push_back("act", torch::nn::Functional(torch::relu))
///      .push_back("head", torch::nn::Linear(8, 2));
/// auto y = chain->forward(torch::randn({3, 4}));            // [3, 2]
/// auto h = chain->forward_range(torch::randn({3, 4}), 0, 2);  // stem and act only
/// ```
class ChainImpl : public torch::nn::Cloneable<ChainImpl> {
 public:
  ChainImpl() = default;

  /// Appends `block` (a module holder, a `std::shared_ptr` to a module, or an `AnyModule`) under
  /// `name`. Throws `mlo::Error` for an empty or duplicate name, an empty name component, or a
  /// dotted name whose group is not the group of the previous block.
  ChainImpl& push_back(const std::string& name, torch::nn::AnyModule block);
  /// `push_back` for any module holder or `std::shared_ptr` to a module, wrapped in an
  /// `AnyModule`.
  template <typename ModuleType>
  ChainImpl& push_back(const std::string& name, ModuleType&& block) {
    return push_back(name, torch::nn::AnyModule(std::forward<ModuleType>(block)));
  }

  /// Runs the whole chain: the installed executor if any, else `forward_range(x, 0, size())`.
  torch::Tensor forward(const torch::Tensor& x);

  /// Runs blocks [begin, end) on `x` in order, plainly (never through the executor).
  /// `forward_range(x, i, i)` returns `x`. Throws `mlo::Error` unless begin <= end <= size().
  torch::Tensor forward_range(const torch::Tensor& x, std::size_t begin, std::size_t end);

  /// Runs block `i` alone on `x`.
  torch::Tensor forward_block(std::size_t i, const torch::Tensor& x);

  /// Number of blocks.
  std::size_t size() const noexcept { return blocks_.size(); }
  /// Whether the chain has no blocks.
  bool is_empty() const noexcept { return blocks_.empty(); }

  /// Block `i`, callable as `block(i).forward(x)`; `block(i).ptr()` is the module, whose
  /// `parameters()` and `buffers()` are the block's. Throws `mlo::Error` if i >= size().
  torch::nn::AnyModule& block(std::size_t i);
  /// Block `i`, read-only; throws `mlo::Error` if i >= size().
  const torch::nn::AnyModule& block(std::size_t i) const;

  /// Block `i` as a module (same as `block(i).ptr()`).
  std::shared_ptr<torch::nn::Module> block_module(std::size_t i) const;

  /// Parameters of blocks [begin, end), in block order: what a checkpointed segment takes as
  /// inputs besides the activation. Throws `mlo::Error` unless begin <= end <= size().
  std::vector<torch::Tensor> range_parameters(std::size_t begin, std::size_t end) const;
  /// What the gradients of blocks [begin, end) flow to: `range_parameters`, or what the installed
  /// block runner names (`BlockRunner::leaves`). Activation checkpointing differentiates these.
  std::vector<torch::Tensor> range_leaves(std::size_t begin, std::size_t end) const;
  /// Buffers (e.g. batch-norm running statistics) of blocks [begin, end), in block order.
  std::vector<torch::Tensor> range_buffers(std::size_t begin, std::size_t end) const;

  /// Name of block `i` ("stem", "layer1.0", ..., "head").
  const std::string& block_name(std::size_t i) const;
  /// Names of all blocks, in order.
  const std::vector<std::string>& block_names() const noexcept { return names_; }
  /// Index of the block called `name`, or nullopt.
  std::optional<std::size_t> index_of(const std::string& name) const;

  /// Makes `forward` run the chain through `executor` (e.g. a checkpointing plan). The executor
  /// should produce the same values as `forward_range(x, 0, size())`. Copied by `clone()`.
  void set_executor(ChainExecutor executor) { executor_ = std::move(executor); }
  /// Restores the plain `forward`.
  void clear_executor() { executor_ = nullptr; }
  /// Whether an executor is installed (`set_executor`).
  bool has_executor() const noexcept { return static_cast<bool>(executor_); }

  /// Makes `forward_range` and `forward_block` run each block through `runner` (null: plainly).
  /// Not copied by `clone()`: a runner belongs to the parameters of this chain.
  void set_block_runner(std::shared_ptr<BlockRunner> runner) { runner_ = std::move(runner); }
  /// The installed block runner, or null.
  BlockRunner* block_runner() const noexcept { return runner_.get(); }

  /// Deep copy: every block cloned (blocks must be `Cloneable`), same names, same executor.
  std::shared_ptr<torch::nn::Module> clone(
      const torch::optional<torch::Device>& device = torch::nullopt) const override;

  /// Nothing to re-initialize: the blocks are given from outside (required by `Cloneable`).
  void reset() override {}

  /// Prints `mlo::nn::Chain(size=N)`; submodules print below it.
  void pretty_print(std::ostream& stream) const override;

 private:
  std::vector<torch::nn::AnyModule> blocks_;
  std::vector<std::string> names_;
  // Group submodules created for dotted names, by full dotted prefix ("layer1").
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> groups_;
  ChainExecutor executor_;
  std::shared_ptr<BlockRunner> runner_;
};

/// Module holder of `ChainImpl` (`Chain chain; chain->push_back(...)`).
TORCH_MODULE(Chain);

}  // namespace nn
}  // namespace mlo
