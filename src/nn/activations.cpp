#include <mlo/base/error.h>
#include <mlo/nn/activations.h>

#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <map>
#include <mutex>

namespace mlo {
namespace nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// NOTE: x * sigmoid(beta x) = silu(beta x) / beta and its derivative is silu'(beta x), so the
// fused SiLU kernels do the work with one new tensor each way (none kept but the input).
class SwishFunction : public torch::autograd::Function<SwishFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double beta) {
    ctx->save_for_backward({x});
    ctx->saved_data["beta"] = beta;
    if (beta == 1.0) return torch::silu(x);
    if (beta == 0.0) return x * 0.5;
    torch::Tensor z = torch::mul(x, beta);
    return torch::silu_(z).div_(beta);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const double beta = ctx->saved_data["beta"].toDouble();
    const torch::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return {torch::Tensor(), torch::Tensor()};
    if (beta == 0.0) return {grad * 0.5, torch::Tensor()};
    if (torch::GradMode::is_enabled()) {
      // create_graph: differentiable ops on the saved input, so the result has a graph.
      const torch::Tensor s = torch::sigmoid(x * beta);
      return {grad * s * (1 + beta * x * (1 - s)), torch::Tensor()};
    }
    if (beta == 1.0) return {torch::silu_backward(grad, x), torch::Tensor()};
    torch::Tensor z = torch::mul(x, beta);
    torch::silu_backward_out(z, grad, z);  // elementwise: writing over its input is safe
    return {z, torch::Tensor()};
  }
};

torch::Tensor torch_swish(const torch::Tensor& x, double beta) {
  return beta == 1.0 ? torch::silu(x) : x * torch::sigmoid(x * beta);
}

}  // namespace

torch::Tensor swish(const torch::Tensor& x, double beta) { return SwishFunction::apply(x, beta); }

torch::Tensor activate(torch::Tensor x, Activation activation, bool memory_efficient) {
  if (activation == Activation::kReLU) return memory_efficient ? torch::relu_(x) : torch::relu(x);
  // NOTE: not torch::silu for the plain variant: LibTorch's fused silu already keeps only its
  // input; the composition is what a Swish written by hand keeps.
  return memory_efficient ? swish(x, 1.0) : x * torch::sigmoid(x);
}

const char* activation_name(Activation activation) {
  return activation == Activation::kSwish ? "swish" : "relu";
}

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::kReLU;
  if (name == "swish") return Activation::kSwish;
  throw Error("unknown activation '" + name + "' (known: relu, swish)");
}

SwishBackend resolve_swish_backend(double beta) {
  // NOTE: a fixed rule, measured with the exact meter (tests/nn/activations_test.cpp): for
  // beta = 1 LibTorch's fused silu keeps only its input; for any other beta the composition
  // x * sigmoid(beta x) keeps the sigmoid too, while mlo's function keeps only the input.
  return beta == 1.0 ? SwishBackend::kTorch : SwishBackend::kCustom;
}

SwishImpl::SwishImpl(const SwishOptions& options_) : options(options_) { reset(); }

void SwishImpl::reset() {
  backend_ = options.backend() == SwishBackend::kAuto ? resolve_swish_backend(options.beta())
                                                      : options.backend();
}

torch::Tensor SwishImpl::forward(const torch::Tensor& x) {
  return backend_ == SwishBackend::kCustom ? swish(x, options.beta())
                                           : torch_swish(x, options.beta());
}

void SwishImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::Swish(beta=" << options.beta()
         << ", backend=" << (backend_ == SwishBackend::kCustom ? "custom" : "torch") << ")";
}

torch::Tensor InplaceReLUImpl::forward(const torch::Tensor& x) {
  if (x.is_leaf() && x.requires_grad() && torch::GradMode::is_enabled()) return torch::relu(x);
  torch::Tensor y = x;
  return y.relu_();
}

void InplaceReLUImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::InplaceReLU()";
}

}  // namespace nn
}  // namespace mlo
