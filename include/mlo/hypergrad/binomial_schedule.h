#pragma once
/// \file
/// Binomial (revolve-style) checkpointing schedules for reversing a chain of K steps with a
/// fixed number of stored states. Pure C++: no LibTorch, usable on its own.
///
/// Paper: A. Griewank, "Achieving logarithmic growth of temporal and spatial complexity in
/// reverse automatic differentiation", Optimization Methods and Software 1 (1992); A. Griewank,
/// A. Walther, "Algorithm 799: revolve", ACM TOMS 26 (2000).
///
/// Model. States x_0 .. x_K, step i maps x_{i-1} to x_i. Reversing step i (its adjoint) needs
/// x_{i-1} in the working slot, and the steps are reversed in the order K, K-1, ..., 1. x_0 is
/// always stored; besides it `snapshots` states may be stored at once. A schedule is optimal
/// when it needs the fewest plain forward steps ("advances"); with s = snapshots + 1 and
/// beta(s, r) = C(s + r, s), the minimum is
///
///   advances(K, snapshots) = r K - beta(s + 1, r - 1),   r = min { r : beta(s, r) >= K }
///
/// so snapshots = ceil(log2 K) gives O(K log K) advances with O(log K) stored states.

#include <cstdint>
#include <vector>

namespace mlo {
namespace hypergrad {

/// One instruction of a reversal schedule.
struct ReverseAction {
  /// What an action does; `index` names the state or step it acts on.
  enum class Kind {
    kRestore,  ///< working state := stored state `index`
    kAdvance,  ///< working state x_index -> x_{index+1} (a plain forward step, no graph)
    kStore,    ///< store the working state x_index in a free snapshot slot
    kFree,     ///< drop the stored state x_index (its slot becomes free)
    kReverse,  ///< reverse step `index` (working state is x_{index-1}): adjoint of x_index
               ///< becomes adjoint of x_{index-1}
  };
  /// What to do.
  Kind kind;
  /// The state or step it acts on (see each `Kind`).
  int64_t index;
};

/// The minimal number of advances to reverse `steps` steps with `snapshots` slots besides x_0
/// (closed form above). `steps` >= 0, `snapshots` >= 0.
int64_t binomial_advances(int64_t steps, int64_t snapshots);

/// An optimal schedule (`binomial_advances(steps, snapshots)` advances, at most `snapshots`
/// states stored besides x_0 at any time). Starts with x_0 stored and the working slot empty.
///
/// ```
/// for (const auto& a : mlo::hypergrad::binomial_schedule(1000, 10)) { ... }
/// ```
std::vector<ReverseAction> binomial_schedule(int64_t steps, int64_t snapshots);

/// The default snapshot count for `steps` steps: ceil(log2(steps)), at least 1.
int64_t default_snapshots(int64_t steps);

}  // namespace hypergrad
}  // namespace mlo
