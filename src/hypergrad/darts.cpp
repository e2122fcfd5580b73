#include <mlo/hypergrad/darts.h>

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <mlo/hypergrad/finite_difference.h>
#include <mlo/hypergrad/forward_mode.h>

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
  return negative_mixed(curr, prev, v, options_.mode(), "darts", route_, [&] {
    return central_difference(curr, prev.parameters(), v, options_.alpha(),
                              options_.exact_restore());
  });
}

void Darts::check(const MethodContext& context) const {
  MLO_CHECK(options_.mode() != DartsMode::kJvp || !context.shards_parameters, "darts.mode: ",
            "problem '", context.problem.name(), "' shards its parameters (zero3), which ",
            "forward mode does not follow; choose finite_difference or auto");
}

MLO_REGISTER_METHOD(DartsOptions);

}  // namespace hypergrad

void DartsOptions::visit(Fields& fields) {
  fields("alpha", alpha(), positive());
  fields("exact_restore", exact_restore());
  fields.enumeration("mode", mode());
}

std::unique_ptr<Hypergradient> DartsOptions::make() const {
  return std::make_unique<hypergrad::Darts>(*this);
}

}  // namespace mlo
