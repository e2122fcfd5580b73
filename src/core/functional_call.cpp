// The functional call (core/functional_call.h): an autograd function whose forward runs the module
// with the given values under its parameters, without a graph, and whose backward recomputes
// that forward with grad and differentiates it (first order).
#include <mlo/core/functional_call.h>

#include "memory/recompute.h"

#include <mlo/base/error.h>
#include <mlo/memory/precision.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

namespace mlo {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward needs besides the saved tensors (a capsule in the autograd context).
struct CallState : torch::CustomClassHolder {
  ModuleForward forward;
  std::vector<at::Tensor> targets;  // the module's trainable parameters
  std::vector<at::Tensor> buffers;  // the module's buffers
  memory::detail::ForwardState recorded;
};

// The module's parameters holding `values` for as long as the scope lives. Each takes the
// storage of its value (`set_data`: the parameter keeps its autograd identity and its version,
// so graphs that saved it before the call still run) and gets its own back at the end, also on
// an exception.
class Swap {
 public:
  Swap(const std::vector<at::Tensor>& targets, const std::vector<at::Tensor>& values)
      : targets_(targets) {
    for (const auto& t : targets_) originals_.push_back(t.detach());
    for (size_t i = 0; i < targets_.size(); ++i) targets_[i].set_data(values[i].detach());
  }
  ~Swap() {
    for (size_t i = 0; i < targets_.size(); ++i) targets_[i].set_data(originals_[i]);
  }
  Swap(const Swap&) = delete;
  Swap& operator=(const Swap&) = delete;

 private:
  std::vector<at::Tensor> targets_;
  std::vector<at::Tensor> originals_;
};

class FunctionalCall : public torch::autograd::Function<FunctionalCall> {
 public:
  // Without grad (Function::apply turns it off around forward): only the values.
  static at::Tensor forward(AutogradContext* ctx, at::TensorList parameters,
                            const at::Tensor& input, c10::intrusive_ptr<CallState> state) {
    state->recorded = memory::detail::ForwardState::record(input.device());
    at::Tensor output;
    {
      // NOTE: below the ADInplaceOrView key nothing here bumps a version counter: buffers the
      // forward updates in place (and puts back) stay usable by graphs that saved them.
      at::AutoDispatchBelowADInplaceOrView keep_versions;
      std::vector<at::Tensor> saved;
      for (const auto& b : state->buffers) saved.push_back(b.clone());
      {
        Swap swap(state->targets, parameters.vec());
        // (a cast cached under autocast is keyed by the parameter: one of the swapped values
        // must neither be read from nor left in the cache)
        memory::CastCacheOff no_cache;
        output = state->forward(input);
      }
      for (size_t i = 0; i < saved.size(); ++i) state->buffers[i].copy_(saved[i]);
    }
    MLO_CHECK(output.defined(), "functional_call: the forward returned an undefined tensor");
    variable_list kept = parameters.vec();
    kept.push_back(input);
    ctx->save_for_backward(kept);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return output;
  }

  // Recomputes the forward with grad at the saved values and differentiates it. Grad mode is
  // on here exactly when the caller asked for create_graph.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    MLO_CHECK(!at::GradMode::is_enabled(),
              "functional_call: a second derivative through a functional call (create_graph in "
              "its backward, as neumann and cg take of a lower loss) is not supported: its "
              "backward is first order; call the module's forward at its own parameters there");
    const auto state =
        c10::static_intrusive_pointer_cast<CallState>(ctx->saved_data["state"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const size_t n = state->targets.size();
    MLO_INTERNAL_ASSERT(saved.size() == n + 1, "functional_call: saved tensors mismatch");
    // One gradient per forward argument: each parameter value, the input, the state (none).
    variable_list grads(n + 2);
    const at::Tensor& grad_output = grad_outputs.at(0);
    if (!grad_output.defined()) return grads;
    const std::vector<at::Tensor> values(saved.begin(), saved.begin() + static_cast<long>(n));
    memory::detail::RecomputeScope scope(state->recorded, state->buffers);
    Swap swap(state->targets, values);
    memory::CastCacheOff no_cache;
    at::AutoGradMode enable(true);
    at::Tensor input = saved[n];
    const bool input_grad = input.requires_grad();
    input = input.detach().requires_grad_(input_grad);
    const at::Tensor output = state->forward(input);
    variable_list inputs = state->targets;
    if (input_grad) inputs.push_back(input);
    if (!output.requires_grad()) return grads;
    const variable_list computed =
        torch::autograd::grad({output}, inputs, {grad_output}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < n; ++i) grads[i] = computed[i];
    if (input_grad) grads[n] = computed[n];
    return grads;
  }
};

}  // namespace

at::Tensor functional_call(torch::nn::Module& module, const std::vector<at::Tensor>& parameters,
                           const at::Tensor& input, ModuleForward forward) {
  MLO_CHECK(static_cast<bool>(forward), "functional_call: empty forward function");
  MLO_CHECK(input.defined(), "functional_call: undefined input");
  auto state = c10::make_intrusive<CallState>();
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    const size_t i = state->targets.size();
    MLO_CHECK(i < parameters.size(), "functional_call: ", parameters.size(),
              " parameter values for a module with more trainable parameters (the next is '",
              item.key(), "')");
    const at::Tensor& p = item.value();
    const at::Tensor& v = parameters[i];
    MLO_CHECK(v.defined() && v.sizes() == p.sizes() && v.scalar_type() == p.scalar_type() &&
                  v.device() == p.device(),
              "functional_call: the value for parameter '", item.key(), "' must be a ",
              c10::toString(p.scalar_type()), " tensor of shape ", p.sizes(), " on ", p.device(),
              ", got ",
              v.defined() ? c10::str(c10::toString(v.scalar_type()), " ", v.sizes(), " on ",
                                     v.device())
                          : std::string("an undefined tensor"));
    state->targets.push_back(p);
  }
  MLO_CHECK(state->targets.size() == parameters.size(), "functional_call: ", parameters.size(),
            " parameter values for a module with ", state->targets.size(),
            " trainable parameters");
  state->buffers = module.buffers();
  state->forward = std::move(forward);
  return FunctionalCall::apply(at::TensorList(parameters), input, std::move(state));
}

}  // namespace mlo
