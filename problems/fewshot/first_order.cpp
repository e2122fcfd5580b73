#include "problems/fewshot/first_order.h"

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <c10/util/StringUtil.h>

namespace mlo {
namespace problems {
namespace fewshot {
namespace {

// Throws unless `lower` and `upper` hold tensors of the same shapes, in the same order.
void check_match(const std::vector<at::Tensor>& lower, const std::vector<at::Tensor>& upper,
                 const std::string& lower_name, const std::string& upper_name) {
  MLO_CHECK(lower.size() == upper.size(), "problem '", lower_name, "': method first_order ",
            "needs the parameters of problem '", upper_name, "' to match its own one to one; it ",
            "has ", lower.size(), " trainable tensors, '", upper_name, "' has ", upper.size());
  for (size_t i = 0; i < lower.size(); ++i) {
    MLO_CHECK(lower[i].sizes() == upper[i].sizes(), "problem '", lower_name,
              "': method first_order needs the parameters of problem '", upper_name,
              "' to match its own one to one; tensor ", i, " is ", lower[i].sizes(), " here and ",
              upper[i].sizes(), " there");
  }
}

}  // namespace

std::unique_ptr<Hypergradient> FirstOrderOptions::make() const {
  return std::make_unique<FirstOrder>();
}

std::vector<at::Tensor> FirstOrder::apply(const std::vector<at::Tensor>& v, Level& curr,
                                          Level& prev) {
  check_match(curr.parameters(), prev.parameters(), curr.name(), prev.name());
  std::vector<at::Tensor> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(v[i].defined() ? v[i].detach().clone() : at::zeros_like(prev.parameters()[i]));
  }
  return out;
}

void FirstOrder::check(const MethodContext& context) const {
  const std::string& name = context.problem.name();
  MLO_CHECK(context.parents == 1 && !context.middle, "problem '", name, "': method first_order ",
            "serves a lower problem with exactly one parent and none below it");
  const Problem& upper = *context.parent_problems.at(0);
  check_match(context.problem.parameters(), upper.parameters(), name, upper.name());
}

MLO_REGISTER_METHOD(FirstOrderOptions);

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
