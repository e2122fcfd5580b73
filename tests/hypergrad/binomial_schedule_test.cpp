// Binomial checkpointing schedules: every schedule is valid (reverses K..1 in order, never holds
// more than `snapshots` states besides x_0), needs exactly the closed-form number of advances,
// and that number is the optimum found by an exhaustive search over all strategies (small K).
#include <mlo/hypergrad/binomial_schedule.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <vector>

namespace binomial_schedule_test {

using mlo::hypergrad::ReverseAction;
using Kind = ReverseAction::Kind;

namespace {

// Runs a schedule on the model of the header and returns its advances; fails on any violation.
int64_t simulate(const std::vector<ReverseAction>& schedule, int64_t steps, int64_t snapshots) {
  std::set<int64_t> stored = {0};
  int64_t working = -1;  // empty
  int64_t next = steps;  // the next step to reverse
  int64_t advances = 0;
  for (const auto& a : schedule) {
    INFO("action kind " << static_cast<int>(a.kind) << " index " << a.index);
    switch (a.kind) {
      case Kind::kRestore:
        REQUIRE(stored.count(a.index) == 1);
        working = a.index;
        break;
      case Kind::kAdvance:
        REQUIRE(working == a.index);
        REQUIRE(working + 1 < steps);
        working = a.index + 1;
        ++advances;
        break;
      case Kind::kStore:
        REQUIRE(working == a.index);
        stored.insert(a.index);
        REQUIRE(static_cast<int64_t>(stored.size()) - 1 <= snapshots);
        break;
      case Kind::kFree:
        REQUIRE(a.index != 0);
        REQUIRE(stored.erase(a.index) == 1);
        break;
      case Kind::kReverse:
        REQUIRE(a.index == next);
        REQUIRE(working == a.index - 1);
        --next;
        break;
    }
  }
  REQUIRE(next == 0);
  return advances;
}

// Exhaustive search (Dijkstra; every move but an advance is free) over all strategies of the
// model: which states are stored, which state is in the working slot, how many steps remain.
int64_t brute_force(int64_t steps, int64_t snapshots) {
  using State = std::tuple<uint32_t, int64_t, int64_t>;  // stored mask (1..K-1), working, next
  std::map<State, int64_t> best;
  using Item = std::pair<int64_t, State>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  const State start{0u, -1, steps};
  best[start] = 0;
  queue.push({0, start});
  while (!queue.empty()) {
    const auto [cost, state] = queue.top();
    queue.pop();
    if (best[state] < cost) continue;
    const auto [mask, working, next] = state;
    if (next == 0) return cost;
    std::vector<std::pair<int64_t, State>> moves;
    // Restore x_0 or any stored state.
    moves.push_back({0, State{mask, 0, next}});
    for (int64_t q = 1; q < steps; ++q) {
      if (mask & (1u << q)) moves.push_back({0, State{mask, q, next}});
    }
    if (working >= 0 && working + 1 < steps) moves.push_back({1, State{mask, working + 1, next}});
    const int64_t used = __builtin_popcount(mask);
    if (working >= 1 && !(mask & (1u << working)) && used < snapshots) {
      moves.push_back({0, State{mask | (1u << working), working, next}});
    }
    for (int64_t q = 1; q < steps; ++q) {
      if (mask & (1u << q)) moves.push_back({0, State{mask & ~(1u << q), working, next}});
    }
    if (working == next - 1) moves.push_back({0, State{mask, working, next - 1}});
    for (const auto& [extra, to] : moves) {
      const auto it = best.find(to);
      if (it == best.end() || cost + extra < it->second) {
        best[to] = cost + extra;
        queue.push({cost + extra, to});
      }
    }
  }
  return -1;
}

// The dynamic program F(n, c) = min_j j + F(n - j, c - 1) + F(j, c) (F(1, c) = 0,
// F(n, 0) = n(n - 1) / 2), independent of the closed form.
int64_t dynamic_program(int64_t steps, int64_t snapshots) {
  std::vector<std::vector<int64_t>> f(static_cast<size_t>(snapshots + 1),
                                      std::vector<int64_t>(static_cast<size_t>(steps + 1), 0));
  for (int64_t n = 1; n <= steps; ++n) f[0][n] = n * (n - 1) / 2;
  for (int64_t c = 1; c <= snapshots; ++c) {
    for (int64_t n = 2; n <= steps; ++n) {
      int64_t best = std::numeric_limits<int64_t>::max();
      for (int64_t j = 1; j < n; ++j) best = std::min(best, j + f[c - 1][n - j] + f[c][j]);
      f[c][n] = best;
    }
  }
  return f[snapshots][steps];
}

}  // namespace

TEST_CASE("Binomial schedule: optimal against an exhaustive search for small K",
          "[hypergrad][binomial]") {
  for (int64_t steps = 1; steps <= 9; ++steps) {
    for (int64_t snapshots = 0; snapshots <= 3; ++snapshots) {
      INFO("K = " << steps << ", snapshots = " << snapshots);
      const int64_t optimum = brute_force(steps, snapshots);
      const auto schedule = mlo::hypergrad::binomial_schedule(steps, snapshots);
      CHECK(simulate(schedule, steps, snapshots) == optimum);
      CHECK(mlo::hypergrad::binomial_advances(steps, snapshots) == optimum);
    }
  }
}

TEST_CASE("Binomial schedule: closed form equals the dynamic program; schedules are valid",
          "[hypergrad][binomial]") {
  for (int64_t steps : {2, 10, 31, 100, 257}) {
    for (int64_t snapshots : {0, 1, 2, 4, 7}) {
      INFO("K = " << steps << ", snapshots = " << snapshots);
      const int64_t dp = dynamic_program(steps, snapshots);
      CHECK(mlo::hypergrad::binomial_advances(steps, snapshots) == dp);
      CHECK(simulate(mlo::hypergrad::binomial_schedule(steps, snapshots), steps, snapshots) == dp);
    }
  }
  // Known values: with no snapshot every step is recomputed from x_0; with K - 1 snapshots
  // each state is computed once; K = 1000 with 10 snapshots needs r = 4 sweeps.
  CHECK(mlo::hypergrad::binomial_advances(10, 0) == 45);
  CHECK(mlo::hypergrad::binomial_advances(10, 9) == 9);
  CHECK(mlo::hypergrad::binomial_advances(1000, 10) == 4 * 1000 - 455);
  CHECK(mlo::hypergrad::default_snapshots(1000) == 10);
  CHECK(mlo::hypergrad::default_snapshots(10) == 4);
  CHECK(mlo::hypergrad::default_snapshots(1) == 1);
}

}  // namespace binomial_schedule_test
