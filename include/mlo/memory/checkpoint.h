#pragma once
/// \file
/// Activation checkpointing: run a block without keeping its intermediate activations and
/// recompute them in backward. Exact for first and second order: backward recomputes the block
/// on the *saved input itself* (not a detached copy) and differentiates the recomputed graph with
/// `torch::autograd::grad(..., create_graph = GradMode::is_enabled())`, so Hessian-vector
/// products (Neumann, CG) and double backward through checkpointed blocks equal the plain ones.
///
/// Idea: T. Chen, B. Xu, C. Zhang, C. Guestrin, "Training Deep Nets with Sublinear Memory Cost",
/// 2016 (arXiv:1604.06174). Which blocks to checkpoint: memory/planner.h.

#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace mlo {
namespace nn {
class ChainImpl;
}  // namespace nn

namespace memory {

/// A block to checkpoint: a function of one tensor (e.g. a module's forward).
using BlockFunction = std::function<torch::Tensor(const torch::Tensor&)>;

/// Runs `fn(input)` keeping only `input` for backward (and a few bytes of RNG state), not the
/// activations inside `fn`; backward recomputes `fn(input)` with grad enabled and returns the
/// gradients of `input` and `params`.
///
/// - `params`: the tensors `fn` reads besides `input` that may need gradients (a module's
///   `parameters()`; for blocks of a chain, `ChainImpl::range_leaves`, which under ZeRO-3 are
///   the shards the blocks gather from); those that do not require grad are skipped, unused ones
///   get no gradient.
/// - `buffers`: tensors `fn` updates in place as a side effect (batch-norm running statistics
///   and `num_batches_tracked`): their values are saved before the recomputation and restored
///   after it, so a training step updates them exactly once.
/// - The CPU random generator's state (and, in CUDA builds, the input device's) is saved in
///   forward and re-installed for the recomputation, then the current state is put back:
///   dropout masks are identical and the random stream of the caller is not disturbed.
/// - The autocast state of forward (CPU and CUDA, enabled flag and dtype) is re-entered for the
///   recomputation.
///
/// Without grad mode, or when neither `input` nor any of `params` requires grad, this is just
/// `fn(input)`. `fn` must not modify `input` in place (checked: throws `mlo::Error`), and must
/// outlive the backward pass (it is called again there).
///
/// ```
/// auto block = torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::Tanh());
/// auto y = mlo::memory::checkpoint([&](const torch::Tensor& x) { return block->forward(x); },
///                                  x, block->parameters(), block->buffers());
/// y.sum().backward();  // same gradients as block->forward(x).sum().backward()
/// ```
torch::Tensor checkpoint(BlockFunction fn, const torch::Tensor& input,
                         const std::vector<torch::Tensor>& params,
                         const std::vector<torch::Tensor>& buffers = {});

/// `checkpoint` of the chain's blocks [begin, end): `chain.forward_range(x, begin, end)` with the
/// range's parameters and buffers. The chain must outlive the backward pass. Throws
/// `mlo::Error` unless begin <= end <= chain.size().
///
/// ```
/// auto h = mlo::memory::checkpoint_range(*model, x, 0, 4);   // blocks 0..3, recomputed
/// auto y = model->forward_range(h, 4, model->size());        // the rest, stored
/// ```
torch::Tensor checkpoint_range(nn::ChainImpl& chain, const torch::Tensor& x, std::size_t begin,
                               std::size_t end);

namespace detail {

/// `torch::autograd::grad({output}, inputs, {grad_output}, create_graph, create_graph,
/// allow_unused = true)`, but `output` is taken over and released before backward runs, so the
/// output's memory goes as soon as the last node that saved it is done (a plain backward frees
/// a block's output that early too). Inputs that do not reach `output` get undefined gradients.
std::vector<torch::Tensor> grad_releasing_output(torch::Tensor&& output,
                                                 const torch::Tensor& grad_output,
                                                 const std::vector<torch::Tensor>& inputs,
                                                 bool create_graph);

}  // namespace detail
}  // namespace memory
}  // namespace mlo
