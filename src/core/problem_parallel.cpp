// Problem's side of data parallelism (docs/distributed.md): averaging over the ranks, and what
// a level whose parameters zero3 shards needs besides (sums and checks over the ranks' slices,
// the gathered values). The per-level strategies are src/core/data_parallel.h and zero3.h.
#include <mlo/core/problem.h>

#include "all_finite.h"
#include "data_parallel.h"
#include "zero3.h"

#include <mlo/dist/process_group.h>

#include <ATen/ATen.h>

#include <algorithm>

namespace mlo {

std::vector<at::Tensor> Problem::full_parameters() const {
  std::vector<at::Tensor> out;
  if (!module_) return out;
  std::vector<std::pair<const void*, at::Tensor>> gathered;
  if (zero3_) gathered = zero3_->gather_copies();
  for (const auto& p : module_->parameters()) {
    if (!p.requires_grad()) continue;
    const auto it = std::find_if(gathered.begin(), gathered.end(), [&](const auto& entry) {
      return entry.first == p.unsafeGetTensorImpl();
    });
    out.push_back(it != gathered.end() ? it->second : p.detach().clone());
  }
  return out;
}

void Problem::all_reduce_mean(const std::vector<at::Tensor>& tensors) const {
  if (group_) group_->all_reduce_mean(tensors);
}

void Problem::mean_gradient(const std::vector<at::Tensor>& grads, const Problem& of) const {
  // NOTE: a sharded level's gradients were reduce-scattered by the backward of each unit, over
  // the same ranks; had this problem opted out, its loss is the same on every rank, whose mean
  // is itself.
  if (!of.shards_parameters()) all_reduce_mean(grads);
}

bool Problem::finite_everywhere(const std::vector<at::Tensor>& v, const Problem& of) const {
  const bool local = detail::all_finite(v);
  // (a vector over sharded parameters: every rank sees its slice, and all must take the same
  // branch after it)
  if (!of.zero3_) return local;
  return of.parallel_->all_finite(local);
}

double Problem::sum_over_shards(double local) const {
  if (!zero3_) return local;
  at::Tensor sum = at::full({1}, local, at::TensorOptions(at::kDouble).device(device_));
  group_->all_reduce_sum({sum});
  return sum.item<double>();
}

}  // namespace mlo
