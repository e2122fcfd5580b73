#include <mlo/hypergrad/neumann.h>

#include <mlo/core/config.h>

#include <mlo/base/error.h>
#include <mlo/core/problem.h>

#include "vector_ops.h"

#include <torch/autograd.h>

namespace mlo {
namespace hypergrad {

Neumann::Neumann(const ProblemConfig& config) : Neumann(config.neumann()) {}

Neumann::Neumann(NeumannOptions options) : options_(std::move(options)) {
  MLO_CHECK(options_.iterations() >= 0, "neumann: iterations must be >= 0, got ",
            options_.iterations());
  MLO_CHECK(options_.alpha() > 0, "neumann: alpha must be > 0, got ", options_.alpha());
}

std::vector<at::Tensor> Neumann::apply(const std::vector<at::Tensor>& v_in, Problem& curr,
                                       Problem& prev) {
  at::AutoGradMode enable_grad(true);
  const detail::TensorList lambda = prev.parameters();
  detail::LowerGradient lower(curr);
  const detail::TensorList v =
      detail::defined_or_zeros(v_in, lower.parameters(), "neumann", curr.name());
  const double alpha = options_.alpha();

  // p = alpha * sum_{k=0..K} (I - alpha H)^k v, accumulated term by term.
  detail::TensorList term = detail::clone(v);
  detail::TensorList sum = detail::clone(v);
  for (int64_t k = 0; k < options_.iterations(); ++k) {
    const detail::TensorList h_term = lower.hvp(term);
    detail::axpy(-alpha, h_term, term);  // term <- (I - alpha H) term
    detail::axpy(1.0, term, sum);
  }
  const detail::TensorList p = detail::scale(sum, alpha);

  detail::TensorList result = lower.mixed(p, lambda);
  detail::negate_(result);
  return result;
}

namespace detail {
void link_neumann() {}
}  // namespace detail

MLO_REGISTER_HYPERGRADIENT(Method::kNeumann, Neumann);

}  // namespace hypergrad
}  // namespace mlo
