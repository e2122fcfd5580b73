#pragma once
/// \file
/// Memory-efficient activations: Swish/SiLU whose backward keeps only the input, and an
/// in-place ReLU. Measured numbers: docs/checkpointing.md ("Activations").
///
/// Swish: P. Ramachandran, B. Zoph, Q. V. Le, "Searching for Activation Functions", 2017
/// (arXiv:1710.05941); SiLU is Swish with beta = 1 (Elfwing, Uchibe, Doya, 2018).

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace mlo {
namespace nn {

/// swish(x) = x * sigmoid(beta * x) as one autograd node that saves only `x` (no sigmoid, no
/// product): backward recomputes sigmoid(beta * x) and returns
/// grad * s * (1 + beta * x * (1 - s)). Differentiable twice (backward under create_graph is
/// built from differentiable ops on the saved input), so it is safe for hypergradients.
/// Example: `auto y = mlo::nn::swish(x, /*beta=*/1.5);`
torch::Tensor swish(const torch::Tensor& x, double beta = 1.0);

/// The activation of a model's layers (`ResNetOptions::activation`, YAML `model.activation`).
enum class Activation {
  kReLU,   ///< max(x, 0)
  kSwish,  ///< x * sigmoid(x) (SiLU, Swish with beta = 1)
};

/// `x` through `activation`, plain or memory-efficient (the same values and gradients):
/// - ReLU, plain: `torch::relu` (a new tensor; its backward keeps the output). Efficient: in
///   place (`relu_`), safe where nothing else reads `x` afterwards (see `InplaceReLU`).
/// - Swish, plain: the composition `x * torch::sigmoid(x)` a hand-written Swish is, two
///   autograd nodes that keep `x` and the sigmoid's output for backward. Efficient: `swish`,
///   one node that keeps only `x`: one activation-sized tensor less per use, kept until backward.
///
/// Example: `auto y = mlo::nn::activate(bn(conv(x)), mlo::nn::Activation::kSwish, true);`
torch::Tensor activate(torch::Tensor x, Activation activation, bool memory_efficient);

/// "relu" or "swish": the YAML spelling of `activation`.
const char* activation_name(Activation activation);
/// The activation spelled `name` ("relu" or "swish"); throws `mlo::Error` naming the known ones
/// for anything else.
Activation parse_activation(const std::string& name);

/// Which implementation `Swish` runs.
enum class SwishBackend {
  kAuto,    ///< whichever of the two keeps fewer bytes for backward (`resolve_swish_backend`)
  kTorch,   ///< torch::silu for beta = 1, else x * torch::sigmoid(beta * x)
  kCustom,  ///< mlo::nn::swish
};

/// Options of `Swish`. Example: `SwishOptions().beta(1.5).backend(SwishBackend::kCustom)`.
struct SwishOptions {
  /// beta in x * sigmoid(beta * x); 1 is SiLU.
  TORCH_ARG(double, beta) = 1.0;
  /// The implementation; `kAuto` picks the one that keeps less for backward.
  TORCH_ARG(SwishBackend, backend) = SwishBackend::kAuto;
};

/// Swish/SiLU module: x * sigmoid(beta * x) through the backend that keeps the least memory.
///
/// ```
/// mlo::nn::Swish act;                                  // SiLU
/// auto y = act(torch::randn({8, 16}));
/// ```
class SwishImpl : public torch::nn::Cloneable<SwishImpl> {
 public:
  /// Swish with `options`, its backend resolved at once (`backend()`).
  explicit SwishImpl(const SwishOptions& options = SwishOptions());
  /// x * sigmoid(beta * x), elementwise, through `backend()`.
  torch::Tensor forward(const torch::Tensor& x);
  /// Resolves the backend from `options` again (`kAuto` by `resolve_swish_backend`).
  void reset() override;
  /// Prints `mlo::nn::Swish(beta=..., backend=custom|torch)`.
  void pretty_print(std::ostream& stream) const override;
  /// The backend in use (kAuto resolved at construction).
  SwishBackend backend() const { return backend_; }

  /// The options it was built with.
  SwishOptions options;

 private:
  SwishBackend backend_ = SwishBackend::kTorch;
};
TORCH_MODULE(Swish);

/// What `SwishBackend::kAuto` resolves to for `beta`: the backend that keeps less for backward,
/// by a fixed rule (kTorch for beta = 1, where LibTorch's fused silu keeps only its input;
/// kCustom otherwise). The rule is checked with the exact meter in the tests.
SwishBackend resolve_swish_backend(double beta);

/// ReLU applied in place (`relu_`): no new tensor, and nothing extra kept for backward, since
/// ReLU's backward needs only its output, which is the overwritten input.
///
/// Safe where no one else reads the input after it: the input is the fresh output of a
/// convolution, linear or batch-norm layer or of a sum (they do not save their outputs), not a
/// residual shortcut, a user's tensor, or a tensor another node saved (tanh, sigmoid, exp and
/// ReLU save outputs: autograd then raises a version error in backward rather than compute
/// wrong gradients). Not as the first op of a checkpointed block (its input is the saved
/// checkpoint input; `memory::checkpoint` refuses with an error). A leaf that requires grad
/// (which autograd forbids to modify) gets the out-of-place `relu`.
///
/// ```
/// auto y = mlo::nn::InplaceReLU()(bn(conv(x)));
/// ```
class InplaceReLUImpl : public torch::nn::Cloneable<InplaceReLUImpl> {
 public:
  InplaceReLUImpl() = default;
  /// max(x, 0), written into `x` itself; a leaf that requires grad (under grad mode) gets the
  /// out-of-place `relu`.
  torch::Tensor forward(const torch::Tensor& x);
  /// Nothing to reset: the module has no parameters or submodules.
  void reset() override {}
  /// Prints `mlo::nn::InplaceReLU()`.
  void pretty_print(std::ostream& stream) const override;
};
TORCH_MODULE(InplaceReLU);

}  // namespace nn
}  // namespace mlo
