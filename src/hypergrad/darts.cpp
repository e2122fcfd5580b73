#include <mlo/hypergrad/darts.h>

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <mlo/hypergrad/finite_difference.h>

#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <cstddef>

namespace mlo {
namespace hypergrad {

Darts::Darts(DartsOptions options) : options_(std::move(options)) {
  check_options(options_);
}

std::vector<at::Tensor> Darts::apply(const std::vector<at::Tensor>& v_in, Level& curr,
                                     Level& prev) {
  at::AutoGradMode enable_grad(true);
  const TensorList v =
      defined_or_zeros(v_in, curr.parameters(), "darts", curr.name());
  return central_difference(curr, prev.parameters(), v, options_.alpha(),
                                    options_.exact_restore());
}

MLO_REGISTER_METHOD(DartsOptions);

}  // namespace hypergrad

void DartsOptions::visit(Fields& fields) {
  fields("alpha", alpha(), positive());
  fields("exact_restore", exact_restore());
}

std::unique_ptr<Hypergradient> DartsOptions::make() const {
  return std::make_unique<hypergrad::Darts>(*this);
}

}  // namespace mlo
