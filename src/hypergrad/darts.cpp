#include <mlo/hypergrad/darts.h>

#include <mlo/core/config.h>

#include <mlo/base/error.h>
#include <mlo/core/problem.h>

#include "finite_difference.h"

#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <cstddef>

namespace mlo {
namespace hypergrad {

Darts::Darts(const ProblemConfig& config) : Darts(config.darts()) {}

Darts::Darts(DartsOptions options) : options_(std::move(options)) {
  MLO_CHECK(options_.alpha() > 0, "darts: alpha must be > 0, got ", options_.alpha());
}

std::vector<at::Tensor> Darts::apply(const std::vector<at::Tensor>& v_in, Problem& curr,
                                     Problem& prev) {
  at::AutoGradMode enable_grad(true);
  const detail::TensorList v =
      detail::defined_or_zeros(v_in, curr.parameters(), "darts", curr.name());
  return detail::central_difference(curr, prev.parameters(), v, options_.alpha(),
                                    options_.exact_restore());
}

namespace detail {
void link_darts() {}
}  // namespace detail

MLO_REGISTER_HYPERGRADIENT(Method::kDarts, Darts);

}  // namespace hypergrad
}  // namespace mlo
