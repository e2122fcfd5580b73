// Cost model, dynamic programs and plans of the checkpointing planner (memory/planner.h).
// Profiling is in profile.cpp; running plans (apply_plan, configure_checkpointing) in
// checkpoint.cpp, next to the checkpoint they run.
#include <mlo/base/error.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace mlo {
namespace memory {
namespace {

// Cost of one segment run on top of `R` bytes kept by the segments before it: the run's
// events reach at most R + peak; afterwards the segment keeps `retained` bytes until its own
// backward. Every event of a step is inside exactly one segment's forward or backward, so the
// step's peak is max over segments of (R_k + peak_k) and its time the sum of the segments'
// (docs/checkpointing.md, "The cost model").
struct SegmentCost {
  int64_t peak = 0;
  int64_t retained = 0;
  double seconds = 0;
};

class Model {
 public:
  Model(const ChainProfile& profile, const CostModel& model)
      : blocks_(profile.blocks), keep_(model.keep_param_grads()) {
    MLO_CHECK(!blocks_.empty(), "checkpointing planner: empty profile");
    suffix_param_grads_.assign(blocks_.size() + 1, 0);
    for (size_t i = blocks_.size(); i-- > 0;) {
      suffix_param_grads_[i] = suffix_param_grads_[i + 1] + blocks_[i].param_grad_bytes;
    }
  }

  size_t size() const { return blocks_.size(); }
  const BlockProfile& block(size_t i) const { return blocks_[i]; }
  bool keep_param_grads() const { return keep_; }

  // Gradient of the output of blocks [., e): block e's input gradient, or the loss's gradient
  // of the chain's output (its size) for e == n.
  int64_t output_grad(size_t e) const {
    return e < size() ? blocks_[e].input_grad_bytes : blocks_.back().output_bytes;
  }
  // Parameter gradients of blocks [e, n) still alive during the backward of earlier blocks.
  int64_t later_param_grads(size_t e) const { return keep_ ? suffix_param_grads_[e] : 0; }

  SegmentCost stored(size_t i) const {
    const BlockProfile& b = blocks_[i];
    SegmentCost c;
    c.peak = std::max(b.forward_peak, b.retained_bytes + output_grad(i + 1) +
                                          later_param_grads(i + 1) + b.backward_peak);
    c.retained = b.retained_bytes;
    c.seconds = b.forward_seconds + b.backward_seconds;
    return c;
  }

  SegmentCost checkpointed(size_t s, size_t e) const {
    SegmentCost c;
    for (size_t j = s; j < e; ++j) {  // forward without grad; the previous output is alive
      const int64_t held = j > s ? blocks_[j - 1].output_bytes : 0;
      c.peak = std::max(c.peak, held + blocks_[j].nograd_peak);
      c.seconds +=
          blocks_[j].nograd_seconds + blocks_[j].forward_seconds + blocks_[j].backward_seconds;
    }
    c.retained = blocks_[e - 1].output_bytes;
    // Backward: the forward's output is gone (the next segment's backward freed it).
    int64_t m = output_grad(e) + later_param_grads(e);
    for (size_t j = s; j < e; ++j) {  // recompute with grad
      c.peak = std::max(c.peak, m + blocks_[j].forward_peak);
      m += blocks_[j].retained_bytes;
    }
    for (size_t j = e; j-- > s;) {  // backward of the recomputed blocks
      c.peak = std::max(c.peak, m + blocks_[j].backward_peak);
      m += blocks_[j].input_grad_bytes + blocks_[j].param_grad_bytes - blocks_[j].retained_bytes -
           (j + 1 < e ? blocks_[j + 1].input_grad_bytes : 0);
    }
    return c;
  }

 private:
  const std::vector<BlockProfile>& blocks_;
  bool keep_;
  std::vector<int64_t> suffix_param_grads_;
};

void check_tiling(const std::vector<Segment>& segments, size_t n, const char* where) {
  size_t at = 0;
  for (const auto& s : segments) {
    MLO_CHECK(s.begin == at && s.end > s.begin, where, ": segment [", s.begin, ", ", s.end,
              ") does not continue the plan at block ", at);
    at = s.end;
  }
  MLO_CHECK(at == n, where, ": the plan covers ", at, " blocks, the chain has ", n);
}

// Merges neighbouring stored segments (same cost, fewer executor steps).
std::vector<Segment> normalized(const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  for (const auto& s : segments) {
    if (!s.checkpointed && !out.empty() && !out.back().checkpointed) {
      out.back().end = s.end;
    } else {
      out.push_back(s);
    }
  }
  return out;
}

std::vector<Segment> all_stored(size_t n) { return {Segment{0, n, false}}; }

// k equal segments, all checkpointed but the last (its activations are needed first).
std::vector<Segment> uniform(size_t n, int64_t k) {
  const size_t parts = std::min(n, static_cast<size_t>(k));
  std::vector<Segment> out;
  for (size_t p = 0; p < parts; ++p) {
    out.push_back(Segment{p * n / parts, (p + 1) * n / parts, p + 1 < parts});
  }
  return normalized(out);
}

}  // namespace

void validate_options(const CheckpointingOptions& o) {
  CheckpointingOptions copy = o;
  const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
  MLO_CHECK(failed.empty(), "checkpointing.", failed);
}

void validate_segments(const std::vector<Segment>& segments, size_t num_blocks) {
  check_tiling(segments, num_blocks, "checkpointing plan");
}

PlanCost evaluate(const ChainProfile& profile, const std::vector<Segment>& segments,
                  const CostModel& cost_model) {
  const Model model(profile, cost_model);
  check_tiling(segments, model.size(), "evaluate");
  PlanCost cost;
  int64_t m = 0;
  auto event = [&](int64_t extra) { cost.peak_bytes = std::max(cost.peak_bytes, m + extra); };
  for (const auto& seg : segments) {  // forward
    for (size_t j = seg.begin; j < seg.end; ++j) {
      const BlockProfile& b = model.block(j);
      cost.seconds += b.forward_seconds + b.backward_seconds;
      if (!seg.checkpointed) {
        event(b.forward_peak);
        m += b.retained_bytes;
      } else {
        cost.seconds += b.nograd_seconds;
        event((j > seg.begin ? model.block(j - 1).output_bytes : 0) + b.nograd_peak);
      }
    }
    if (seg.checkpointed) m += model.block(seg.end - 1).output_bytes;
  }
  m += model.output_grad(model.size());  // the loss's gradient of the output
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {  // backward
    const Segment& seg = *it;
    if (seg.checkpointed) {
      m -= model.block(seg.end - 1).output_bytes;
      for (size_t j = seg.begin; j < seg.end; ++j) {
        event(model.block(j).forward_peak);
        m += model.block(j).retained_bytes;
      }
    }
    int64_t segment_param_grads = 0;
    for (size_t j = seg.end; j-- > seg.begin;) {
      const BlockProfile& b = model.block(j);
      event(b.backward_peak);
      m += b.input_grad_bytes + b.param_grad_bytes - b.retained_bytes;
      segment_param_grads += b.param_grad_bytes;
      // The output gradient is released when the block is done, except a checkpointed
      // segment's incoming one, held by its node until the whole segment is done.
      if (!seg.checkpointed || j + 1 < seg.end) m -= model.output_grad(j + 1);
      if (!seg.checkpointed && !model.keep_param_grads()) m -= b.param_grad_bytes;
    }
    if (seg.checkpointed) {
      m -= model.output_grad(seg.end);
      if (!model.keep_param_grads()) m -= segment_param_grads;
    }
  }
  return cost;
}

std::optional<std::vector<Segment>> solve_budget(const ChainProfile& profile, int64_t budget_bytes,
                                                 const CostModel& cost_model) {
  const Model model(profile, cost_model);
  const size_t n = model.size();
  // Pareto front of partial plans for blocks [0, e): (bytes kept, seconds), none dominated;
  // a partial plan's future depends only on what it keeps, so dominated ones never help.
  struct State {
    int64_t kept;
    double seconds;
    size_t from, index;  // predecessor: front and entry
    bool checkpointed;
  };
  std::vector<std::vector<State>> fronts(n + 1);
  fronts[0].push_back(State{0, 0.0, 0, 0, false});
  for (size_t e = 1; e <= n; ++e) {
    std::vector<State> candidates;
    auto extend = [&](size_t s, const SegmentCost& c, bool checkpointed) {
      for (size_t k = 0; k < fronts[s].size(); ++k) {
        const State& st = fronts[s][k];
        if (st.kept + c.peak > budget_bytes) continue;
        candidates.push_back(
            State{st.kept + c.retained, st.seconds + c.seconds, s, k, checkpointed});
      }
    };
    extend(e - 1, model.stored(e - 1), false);
    for (size_t s = 0; s < e; ++s) extend(s, model.checkpointed(s, e), true);
    std::sort(candidates.begin(), candidates.end(), [](const State& a, const State& b) {
      return a.kept != b.kept ? a.kept < b.kept : a.seconds < b.seconds;
    });
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : candidates) {
      if (c.seconds < best) {
        fronts[e].push_back(c);
        best = c.seconds;
      }
    }
  }
  if (fronts[n].empty()) return std::nullopt;
  // The last entry of a front has the least time (entries: more kept, less time).
  std::vector<Segment> plan;
  size_t e = n, k = fronts[n].size() - 1;
  while (e > 0) {
    const State& st = fronts[e][k];
    plan.push_back(Segment{st.from, e, st.checkpointed});
    e = st.from;
    k = st.index;
  }
  std::reverse(plan.begin(), plan.end());
  return normalized(plan);
}

std::vector<Segment> solve_min_memory(const ChainProfile& profile, double max_seconds,
                                      const CostModel& cost_model) {
  const Model model(profile, cost_model);
  const std::vector<Segment> stored = all_stored(model.size());
  const PlanCost base = evaluate(profile, stored, cost_model);
  // fastest(B) is the least time under peak <= B; it falls as B grows. Find the least integer
  // B with fastest(B) <= max_seconds: that B is the least peak of any plan within the time.
  auto fits = [&](int64_t budget) {
    const auto plan = solve_budget(profile, budget, cost_model);
    return plan && evaluate(profile, *plan, cost_model).seconds <= max_seconds;
  };
  if (!fits(base.peak_bytes)) return stored;
  int64_t lo = -1, hi = base.peak_bytes;  // fits(hi), !fits(lo)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return *solve_budget(profile, hi, cost_model);
}

std::vector<Segment> make_segments(size_t num_blocks,
                                   const std::vector<std::pair<size_t, size_t>>& ranges) {
  std::vector<Segment> out;
  size_t at = 0;
  for (const auto& [begin, end] : ranges) {
    MLO_CHECK(begin >= at && end > begin && end <= num_blocks, "make_segments: range [", begin,
              ", ", end, ") overlaps, is empty or leaves the ", num_blocks, " blocks");
    if (begin > at) out.push_back(Segment{at, begin, false});
    out.push_back(Segment{begin, end, true});
    at = end;
  }
  if (at < num_blocks) out.push_back(Segment{at, num_blocks, false});
  return out;
}

bool CheckpointPlan::is_checkpointed(size_t i) const {
  for (const auto& s : segments) {
    if (i >= s.begin && i < s.end) return s.checkpointed;
  }
  return false;
}

size_t CheckpointPlan::num_checkpointed() const {
  return static_cast<size_t>(std::count_if(segments.begin(), segments.end(),
                                           [](const Segment& s) { return s.checkpointed; }));
}

double CheckpointPlan::memory_ratio() const {
  return baseline.peak_bytes > 0
             ? static_cast<double>(predicted.peak_bytes) / static_cast<double>(baseline.peak_bytes)
             : 1.0;
}

double CheckpointPlan::time_overhead() const {
  return baseline.seconds > 0 ? predicted.seconds / baseline.seconds - 1.0 : 0.0;
}

std::string CheckpointPlan::to_string() const {
  std::ostringstream out;
  out << "checkpointing plan (" << mlo::to_string(strategy) << "):\n";
  char line[200];
  size_t index = 0;
  for (const auto& s : segments) {
    if (s.checkpointed) ++index;
    for (size_t i = s.begin; i < s.end; ++i) {
      const std::string name = i < block_names.size() ? block_names[i] : std::to_string(i);
      if (s.checkpointed) {
        std::snprintf(line, sizeof(line), "  %3zu %-16s checkpoint (segment %zu: blocks %zu-%zu)\n",
                      i, name.c_str(), index, s.begin, s.end - 1);
      } else {
        std::snprintf(line, sizeof(line), "  %3zu %-16s store\n", i, name.c_str());
      }
      out << line;
    }
  }
  std::snprintf(line, sizeof(line),
                "predicted peak %.1f MiB (%.1f%% of %.1f MiB without checkpointing), time %.3f s "
                "(%+.1f%%)\n",
                to_mib(predicted.peak_bytes), 100.0 * memory_ratio(), to_mib(baseline.peak_bytes),
                predicted.seconds, 100.0 * time_overhead());
  out << line;
  return out.str();
}

CheckpointPlan make_plan(const ChainProfile& profile, const CheckpointingOptions& options) {
  validate_options(options);
  MLO_CHECK(profile.size() > 0, "make_plan: empty profile");
  const size_t n = profile.size();
  const CostModel& model = options.cost_model();
  CheckpointPlan plan;
  plan.strategy = options.strategy();
  for (const auto& b : profile.blocks) plan.block_names.push_back(b.name);
  plan.baseline = evaluate(profile, all_stored(n), model);
  switch (options.strategy()) {
    case Checkpointing::kNone:
      plan.segments = all_stored(n);
      break;
    case Checkpointing::kUniform:
      plan.segments = uniform(n, options.segments());
      break;
    case Checkpointing::kSqrt:
      plan.segments =
          uniform(n, std::max<int64_t>(1, std::llround(std::sqrt(static_cast<double>(n)))));
      break;
    case Checkpointing::kOptimal: {
      const int64_t budget =
          options.budget_bytes() > 0
              ? options.budget_bytes()
              : static_cast<int64_t>(options.budget_fraction() *
                                     static_cast<double>(plan.baseline.peak_bytes));
      auto solved = solve_budget(profile, budget, model);
      if (!solved) {
        solved = solve_min_memory(profile, std::numeric_limits<double>::infinity(), model);
        char why[96];
        std::snprintf(why, sizeof(why),
                      "no plan fits the budget of %.1f MiB; the smallest-memory plan",
                      to_mib(budget));
        plan.fallback = why;
        spdlog::warn(
            "checkpointing: no plan fits the budget of {:.1f} MiB; using the "
            "smallest-memory plan ({:.1f} MiB predicted)",
            to_mib(budget), to_mib(evaluate(profile, *solved, model).peak_bytes));
      }
      plan.segments = *solved;
      break;
    }
    case Checkpointing::kMinMemory:
      plan.segments =
          solve_min_memory(profile, plan.baseline.seconds * (1.0 + options.max_overhead()), model);
      break;
  }
  plan.predicted = evaluate(profile, plan.segments, model);
  return plan;
}

CheckpointPlan plan_checkpointing(nn::ChainImpl& chain, const torch::Tensor& sample_input,
                                  const CheckpointingOptions& options) {
  validate_options(options);
  return make_plan(profile_chain(chain, sample_input, options.profile()), options);
}

}  // namespace memory
}  // namespace mlo
