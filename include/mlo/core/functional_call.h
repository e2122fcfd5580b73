#pragma once
/// \file
/// `mlo::functional_call`: a module's forward at parameters given by the caller (a
/// look-ahead w - eta g, say), differentiable with respect to them, with the module left as it
/// was. LibTorch's C++ API has no `torch.func.functional_call`; modules read their parameters
/// from members, so this swaps the values under them for the call:
///
/// ```
/// // The learner's validation loss one SGD step ahead, as a function of the step:
/// std::vector<torch::Tensor> ahead;
/// for (size_t i = 0; i < w.size(); ++i) ahead.push_back(w[i] - lr * g[i]);
/// auto logits = mlo::functional_call(learner->module_as<MlpImpl>(), ahead, x_valid);
/// ```
///
/// - `parameters`: one tensor per trainable parameter of the module (those that require grad, in
///   registration order, as `module.parameters()` lists them), each with its parameter's shape,
///   dtype and device; checked (`mlo::Error` naming the parameter).
/// - The result is differentiable with respect to `parameters` and to `input`: its backward is
///   the module's gradient at those values, with the same random state (dropout masks) and
///   autocast state as the call. Its backward recomputes the forward (as activation
///   checkpointing does), so `forward` and the module must outlive it.
/// - First order: a second derivative through the call (`create_graph` in its backward, as
///   Neumann and CG take of a lower loss) is an error naming the call.
/// - The module is as it was on every exit, an exception included: its parameters keep their
///   values, storage and leaf status, their `grad()` is untouched, and buffers the forward updates
///   (batch-norm running statistics) are put back.
/// - `forward` must read the module's parameters, not keep them; one call at a time per module.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <vector>

namespace mlo {

/// A forward of a module on one input (`[m](const at::Tensor& x) { return m->forward(x); }`).
using ModuleForward = std::function<at::Tensor(const at::Tensor& input)>;

/// `forward(input)` with `module`'s trainable parameters holding the values of `parameters`
/// (see the file comment).
at::Tensor functional_call(torch::nn::Module& module, const std::vector<at::Tensor>& parameters,
                           const at::Tensor& input, ModuleForward forward);

/// The same for a module whose `forward` takes one tensor: `module->forward(input)`.
template <typename Impl>
at::Tensor functional_call(const std::shared_ptr<Impl>& module,
                           const std::vector<at::Tensor>& parameters, const at::Tensor& input) {
  Impl* m = module.get();
  return functional_call(*m, parameters, input, [m](const at::Tensor& x) { return m->forward(x); });
}

/// The same for a LibTorch module holder: `functional_call(torch::nn::Linear(4, 2), ...)`.
template <typename Impl>
at::Tensor functional_call(const torch::nn::ModuleHolder<Impl>& module,
                           const std::vector<at::Tensor>& parameters, const at::Tensor& input) {
  return functional_call(module.ptr(), parameters, input);
}

}  // namespace mlo
