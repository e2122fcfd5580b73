#include <mlo/core/path.h>

#include "level_runtime.h"

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/method.h>

#include <c10/util/ScopeExit.h>

#include <utility>

namespace mlo {

Path::Path(std::vector<Hop> hops) : hops_(std::move(hops)) {
  MLO_INTERNAL_ASSERT(!hops_.empty(), "a hypergradient path needs at least one hop");
  for (size_t i = 0; i < hops_.size(); ++i) {
    MLO_INTERNAL_ASSERT(hops_[i].curr && hops_[i].prev && hops_[i].method, "hop ", i,
                        " of a hypergradient path is incomplete");
    MLO_INTERNAL_ASSERT(i + 1 == hops_.size() || hops_[i].prev == hops_[i + 1].curr, "hop ", i,
                        " of a hypergradient path does not chain to the next");
  }
}

std::vector<at::Tensor> Path::propagate(std::vector<at::Tensor> v) const {
  for (const Hop& hop : hops_) {
    detail::LevelRuntime* runtime =
        hop.upper_gradients_only ? dynamic_cast<detail::LevelRuntime*>(hop.curr) : nullptr;
    if (runtime != nullptr) runtime->set_upper_gradients_only(hop.prev);
    const auto reset = c10::make_scope_exit([runtime] {
      if (runtime != nullptr) runtime->set_upper_gradients_only(nullptr);
    });
    v = hop.method->apply(v, *hop.curr, *hop.prev);
    // Under data parallelism the hop evaluated `curr`'s loss on this rank's shard only. With the
    // same v everywhere, every hop is linear in that loss's batch (a finite difference, or a
    // mixed product after reduced Hessian products), so the mean over the ranks is the global
    // batch's result, and the next hop starts from the same v on every rank.
    // (Gradients for parameters sharded by zero3 were averaged in their units' backward.)
    hop.curr->mean_gradient(v, *hop.prev);
  }
  return v;
}

std::string Path::describe() const {
  std::string out = last().name();
  for (const Hop& hop : hops_) out += " -> " + hop.curr->name();
  return out + " -> " + last().name();
}

}  // namespace mlo
