#include <mlo/hypergrad/neumann.h>

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <mlo/hypergrad/forward_mode.h>
#include <mlo/hypergrad/vector.h>

#include <torch/autograd.h>

namespace mlo {
namespace hypergrad {

Neumann::Neumann(NeumannOptions options) : options_(std::move(options)) {
  check_options(options_);
}

std::vector<at::Tensor> Neumann::apply(const std::vector<at::Tensor>& v_in, Level& curr,
                                       Level& prev) {
  at::AutoGradMode enable_grad(true);
  const TensorList lambda = prev.parameters();
  SecondOrder lower(curr, options_.mode(), "neumann", route_);
  const TensorList v =
      defined_or_zeros(v_in, curr.parameters(), "neumann", curr.name());
  const double alpha = options_.alpha();

  // p = alpha * sum_{k=0..K} (I - alpha H)^k v, accumulated term by term.
  TensorList term = clone(v);
  TensorList sum = clone(v);
  bool negative_curvature = false;
  for (int64_t k = 0; k < options_.iterations(); ++k) {
    const TensorList h_term = lower.hvp(term);
    const double curvature = dot(term, h_term);
    if (!(curvature > 0.0) && dot(term, term) > 0.0) negative_curvature = true;
    axpy(-alpha, h_term, term);  // term <- (I - alpha H) term
    axpy(1.0, term, sum);
  }
  const double v_norm = norm(v);
  diagnostics_ = {
      {"iterations", static_cast<double>(options_.iterations())},
      {"term_ratio", v_norm > 0.0 ? norm(term) / v_norm : 0.0},
      {"negative_curvature", negative_curvature ? 1.0 : 0.0},
  };
  const TensorList p = scale(sum, alpha);

  TensorList result = lower.mixed(p, lambda);
  // (after the mixed product, which may fall back too)
  if (options_.mode() != HvpMode::kDoubleBackward) {
    diagnostics_["jvp_fell_back"] = route_.fallen_back ? 1.0 : 0.0;
  }
  negate_(result);
  return result;
}

MLO_REGISTER_METHOD(NeumannOptions);

}  // namespace hypergrad

void NeumannOptions::visit(Fields& fields) {
  fields("iterations", iterations(), at_least(0));
  fields("alpha", alpha(), positive());
  fields.enumeration("mode", mode());
}

std::unique_ptr<Hypergradient> NeumannOptions::make() const {
  return std::make_unique<hypergrad::Neumann>(*this);
}

}  // namespace mlo
