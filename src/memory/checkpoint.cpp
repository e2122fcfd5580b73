// Activation checkpointing (memory/checkpoint.h) and the execution of checkpointing plans
// (apply_plan, configure_checkpointing of memory/planner.h).
#include <mlo/base/error.h>
#include <mlo/detail/torch_compat.h>
#include <mlo/memory/checkpoint.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>

#include "memory/recompute.h"

#include <ATen/core/ivalue.h>
#include <spdlog/spdlog.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace mlo {
namespace memory {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a checkpoint needs in backward besides the saved tensors. Lives in the autograd
// context as a capsule (an IValue that can hold any CustomClassHolder).
struct CheckpointState : torch::CustomClassHolder {
  BlockFunction fn;
  std::vector<at::Tensor> buffers;
  int64_t num_params = 0;
  detail::ForwardState recorded;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Runs without grad (Function::apply turns grad mode off around forward), so nothing inside
  // `fn` is kept; saves the input itself and the parameters.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, at::TensorList params,
                            c10::intrusive_ptr<CheckpointState> state) {
    state->num_params = static_cast<int64_t>(params.size());
    state->recorded = detail::ForwardState::record(input.device());

    const auto version = input._version();
    at::Tensor output;
    {
      // NOTE: casts made here have no history; kept in autocast's cache, they would replace
      // the weights' casts in a later forward of the same region (memory/precision.h).
      CastCacheOff no_cache;
      output = state->fn(input);
    }
    MLO_CHECK(input._version() == version,
              "checkpoint: the block modified its input in place; it cannot be checkpointed "
              "(its input is what backward recomputes from)");
    MLO_CHECK(output.defined(), "checkpoint: the block returned an undefined tensor");

    variable_list saved{input};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return output;
  }

  // Recomputes the block on the saved input (with its history, so create_graph reaches through
  // it) and differentiates the recomputed graph. Grad mode is on here exactly when the caller
  // asked for create_graph.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto state =
        c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    MLO_INTERNAL_ASSERT(saved.size() == static_cast<size_t>(1 + state->num_params));
    // One gradient per forward argument: input, each parameter, and the state (none).
    variable_list grads(saved.size() + 1);
    const at::Tensor& grad_output = grad_outputs.at(0);
    if (!grad_output.defined()) return grads;

    const bool create_graph = at::GradMode::is_enabled();
    variable_list inputs;
    std::vector<size_t> slots;
    for (size_t i = 0; i < saved.size(); ++i) {
      if (saved[i].defined() && saved[i].requires_grad()) {
        inputs.push_back(saved[i]);
        slots.push_back(i);
      }
    }
    if (inputs.empty()) return grads;

    at::Tensor output;
    {
      detail::RecomputeScope scope(state->recorded, state->buffers);
      at::AutoGradMode enable(true);
      output = state->fn(saved[0]);
    }
    if (!output.requires_grad()) return grads;
    const variable_list computed =
        detail::grad_releasing_output(std::move(output), grad_output, inputs, create_graph);
    for (size_t k = 0; k < slots.size(); ++k) grads[slots[k]] = computed[k];
    return grads;
  }
};

}  // namespace

namespace detail {

std::vector<at::Tensor> grad_releasing_output(at::Tensor&& output, const at::Tensor& grad_output,
                                              const std::vector<at::Tensor>& inputs,
                                              bool create_graph) {
  MLO_INTERNAL_ASSERT(output.requires_grad(), "grad_releasing_output: output needs no grad");
  const torch::autograd::edge_list roots{torch::autograd::impl::gradient_edge(output)};
  // As torch::autograd::grad does: capture each input's gradient at its edge.
  torch::autograd::edge_list edges;
  std::vector<size_t> reachable;
  for (size_t i = 0; i < inputs.size(); ++i) {
    mlo::detail::NodePtr fn = inputs[i].grad_fn();
    if (!fn) fn = torch::autograd::impl::try_get_grad_accumulator(inputs[i]);
    if (!fn) continue;  // a leaf nothing used: no gradient
    edges.emplace_back(std::move(fn), inputs[i].output_nr());
    reachable.push_back(i);
  }
  std::vector<at::Tensor> grads(inputs.size());
  if (edges.empty()) return grads;
  output.reset();  // NOTE: the graph keeps what backward needs; our reference would pin it
  const variable_list computed = torch::autograd::Engine::get_default_engine().execute(
      roots, {grad_output}, /*keep_graph=*/create_graph, create_graph,
      /*accumulate_grad=*/false, edges);
  for (size_t k = 0; k < reachable.size(); ++k) grads[reachable[k]] = computed[k];
  return grads;
}

}  // namespace detail

at::Tensor checkpoint(BlockFunction fn, const at::Tensor& input,
                      const std::vector<at::Tensor>& params,
                      const std::vector<at::Tensor>& buffers) {
  MLO_CHECK(static_cast<bool>(fn), "checkpoint: empty block function");
  MLO_CHECK(input.defined(), "checkpoint: undefined input");
  bool needs_grad = input.requires_grad();
  for (const auto& p : params) needs_grad = needs_grad || (p.defined() && p.requires_grad());
  if (!at::GradMode::is_enabled() || !needs_grad) return fn(input);

  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = std::move(fn);
  state->buffers = buffers;
  return CheckpointFunction::apply(input, at::TensorList(params), std::move(state));
}

at::Tensor checkpoint_range(nn::ChainImpl& chain, const at::Tensor& x, std::size_t begin,
                            std::size_t end) {
  MLO_CHECK(begin <= end && end <= chain.size(), "checkpoint_range: range [", begin, ", ", end,
            ") is not inside the chain's ", chain.size(), " blocks");
  if (begin == end) return x;
  nn::ChainImpl* target = &chain;
  return checkpoint(
      [target, begin, end](const at::Tensor& input) {
        return target->forward_range(input, begin, end);
      },
      x, chain.range_leaves(begin, end), chain.range_buffers(begin, end));
}

namespace {

// Runs the chain segment by segment: plainly or through checkpoint_range.
torch::Tensor run_segments(nn::ChainImpl& chain, const torch::Tensor& x,
                           const std::vector<Segment>& segments) {
  torch::Tensor out = x;
  for (const auto& s : segments) {
    out = s.checkpointed ? checkpoint_range(chain, out, s.begin, s.end)
                         : chain.forward_range(out, s.begin, s.end);
  }
  return out;
}

}  // namespace

void apply_plan(nn::ChainImpl& chain, const CheckpointPlan& plan) {
  validate_segments(plan.segments, chain.size());
  if (plan.num_checkpointed() == 0) {
    chain.clear_executor();
    return;
  }
  chain.set_executor([segments = plan.segments](nn::ChainImpl& c, const torch::Tensor& x) {
    return run_segments(c, x, segments);
  });
}

std::shared_ptr<const LazyPlan> configure_checkpointing(torch::nn::Module& module,
                                                        const std::string& owner,
                                                        const CheckpointingOptions& options) {
  validate_options(options);
  auto* chain = dynamic_cast<nn::ChainImpl*>(&module);
  if (options.strategy() == Checkpointing::kNone) {
    if (chain) chain->clear_executor();
    return nullptr;
  }
  MLO_CHECK(chain, "problem '", owner, "': checkpointing ", to_string(options.strategy()),
            " needs a model that is an mlo::nn::Chain");
  struct Shared {
    CheckpointingOptions options;
    std::string owner;
    std::mutex mutex;
    std::shared_ptr<LazyPlan> lazy = std::make_shared<LazyPlan>();
  };
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->owner = owner;
  chain->set_executor([shared](nn::ChainImpl& c, const torch::Tensor& x) {
    std::vector<Segment> segments;
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (!shared->lazy->plan) {
        shared->lazy->plan = plan_checkpointing(c, x, shared->options);
        spdlog::info("problem '{}': {}", shared->owner, shared->lazy->plan->to_string());
      }
      segments = shared->lazy->plan->segments;
    }
    return run_segments(c, x, segments);
  });
  return shared->lazy;
}

}  // namespace memory
}  // namespace mlo
