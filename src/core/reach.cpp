#include "reach.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_set>

namespace mlo {
namespace detail {

bool reaches(const at::Tensor& loss, const std::vector<at::Tensor>& leaves) {
  if (!loss.defined() || !loss.requires_grad()) return false;
  std::unordered_set<const torch::autograd::Node*> targets;
  for (const auto& leaf : leaves) {
    if (!leaf.defined()) continue;
    if (leaf.unsafeGetTensorImpl() == loss.unsafeGetTensorImpl()) return true;
    // (a leaf's accumulator exists once a graph uses the leaf; none: this graph does not)
    if (const auto accumulator = torch::autograd::impl::try_get_grad_accumulator(leaf)) {
      targets.insert(accumulator.get());
    }
  }
  if (targets.empty()) return false;
  std::vector<const torch::autograd::Node*> stack;
  std::unordered_set<const torch::autograd::Node*> seen;
  if (const auto& root = loss.grad_fn()) stack.push_back(root.get());
  while (!stack.empty()) {
    const torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (targets.count(node)) return true;
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
  return false;
}

}  // namespace detail
}  // namespace mlo
