// The ablation's timing rounds (ablation_detail.h: time_interleaved, time_in_rounds,
// time_own_processes). Memory is measured one row at a time (run/ablation_measure.cpp); time is
// not, because a machine's load drifts: a row measured alone in a quiet minute looks faster than
// the baseline measured in a busy one. Here every row's experiment is alive at once and each
// round times each row for about AblationOptions::round_seconds (one meta-iteration where one
// takes longer), the rows taking turns meta-iteration by meta-iteration, so whatever the machine
// does, the rows of one round see nearly the same.
#include "ablation_detail.h"

#include <mlo/base/error.h>
#include "heap_reuse.h"
#include "ablation.h"
#include <mlo/run/config.h>
#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/run/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

namespace mlo {
namespace run {
namespace detail {

double median(std::vector<double> values) {
  MLO_CHECK(!values.empty(), "ablation: the median of no values");
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

TimedRounds time_interleaved(const std::string& config_path,
                             const std::vector<std::vector<std::string>>& row_overrides,
                             const std::vector<std::string>& names, const std::string& problem,
                             int64_t rounds, const std::vector<int64_t>& per_round,
                             const std::function<void(const std::string&)>& progress) {
  MLO_CHECK(rounds >= 1, "ablation: rounds must be >= 1, got ", rounds);
  MLO_CHECK(names.size() == row_overrides.size() && per_round.size() == row_overrides.size(),
            "ablation: ", names.size(), " names and ", per_round.size(), " counts for ",
            row_overrides.size(), " rows");
  // Freed heap memory kept for reuse while the rows are alive (declared first: it ends after
  // them, and gives back what they held). Without it glibc maps each large tensor afresh and
  // every row pays page faults whose cost follows the kernel's state, not the row's computation.
  memory::HeapReuse heap;
  struct Timed {
    std::unique_ptr<Experiment> experiment;
    Problem* problem = nullptr;
    int64_t steps = 1;  // global steps per meta-iteration
  };
  std::vector<Timed> rows;
  TimedRounds out;
  out.heap_reuse = heap.active();
  out.errors.assign(row_overrides.size(), "");
  for (std::size_t k = 0; k < row_overrides.size(); ++k) {
    if (progress) progress("timing: building and warming up " + names[k]);
    Timed t;
    try {
      const RunConfig config = load_run_config(
          config_path, measuring_overrides(config_path, row_overrides[k], false));
      t.experiment = make_experiment(config);
      Engine& engine = t.experiment->engine();
      engine.initialize();
      for (const auto& p : engine.problems()) p->train();
      const std::string main =
          memory_target(*t.experiment, config.experiment, "mlo ablate").main_problem();
      t.problem = t.experiment->problem(problem.empty() ? main : problem).get();
      t.steps = t.problem->config().unroll_steps() * t.problem->config().gradient_accumulation();
      warm_up(engine, t.steps);
      synchronize(t.problem->device());
    } catch (const std::exception& e) {
      // The first row is every ratio's reference; another costs only its own rounds (one more
      // experiment alive may not fit where the memory rows each did alone).
      if (k == 0) throw;
      out.errors[k] = e.what();
      if (progress) progress("timing: " + names[k] + " left out of the rounds: " + e.what());
      t = Timed();
    }
    out.plans.push_back(t.experiment ? plan_line(t.experiment->engine(), *t.problem) : "");
    rows.push_back(std::move(t));
  }
  out.seconds.assign(rows.size(), std::vector<double>(static_cast<std::size_t>(rounds), 0.0));
  out.samples.assign(rows.size(),
                     std::vector<std::vector<double>>(static_cast<std::size_t>(rounds)));
  // The passes of a round: the most meta-iterations any row takes. A row with fewer runs in
  // passes spread evenly over the round (row_passes), so its meta-iterations and the others'
  // cover the same stretch of time.
  int64_t most = 1;
  for (int64_t n : per_round) most = std::max(most, n);
  std::vector<std::vector<bool>> in_pass(rows.size());
  for (std::size_t k = 0; k < rows.size(); ++k) in_pass[k] = row_passes(per_round[k], most);
  for (int64_t r = 0; r < rounds; ++r) {
    std::string line =
        "timing: round " + std::to_string(r + 1) + "/" + std::to_string(rounds) + ":";
    // The rows take turns meta-iteration by meta-iteration (not row by row), so a slow spell
    // of the machine, seconds long on a GPU host, falls on every row of the round alike.
    out.order.emplace_back();
    for (int64_t pass = 0; pass < most; ++pass) {
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::size_t k = (i + static_cast<std::size_t>(r)) % rows.size();
        Timed& t = rows[k];
        if (!t.experiment || !in_pass[k][static_cast<std::size_t>(pass)]) continue;
        Engine& engine = t.experiment->engine();
        auto& mine = out.samples[k][static_cast<std::size_t>(r)];
        try {
          synchronize(t.problem->device());
          const auto start = std::chrono::steady_clock::now();
          for (int64_t s = 0; s < t.steps; ++s) engine.step();
          synchronize(t.problem->device());
          mine.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          out.order.back().push_back(k);
        } catch (const std::exception& e) {
          // As in the building above: the reference's failure ends the rounds, another row's
          // takes that row out of them (it keeps its measured time).
          if (k == 0) throw;
          out.errors[k] = e.what();
          if (progress) progress("timing: " + names[k] + " left out of the rounds: " + e.what());
          t = Timed();
          mine.clear();
        }
      }
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::size_t k = (i + static_cast<std::size_t>(r)) % rows.size();
      const auto& mine = out.samples[k][static_cast<std::size_t>(r)];
      if (mine.empty() || !out.errors[k].empty()) continue;
      // The median of the round's meta-iterations: a stray slow one (a page fault, another
      // process's burst) does not move it.
      const double seconds = median(mine);
      out.seconds[k][static_cast<std::size_t>(r)] = seconds;
      char part[96];
      std::snprintf(part, sizeof(part), " %s %.2f s;", names[k].c_str(), seconds);
      line += part;
    }
    if (progress) progress(line);
  }
  return out;
}

std::vector<bool> row_passes(int64_t count, int64_t passes) {
  MLO_CHECK(passes >= 1, "ablation: a round needs at least one pass, got ", passes);
  std::vector<bool> in(static_cast<std::size_t>(passes), false);
  const int64_t n = std::min(std::max<int64_t>(count, 1), passes);
  // The j-th of n meta-iterations at the middle of the j-th of n equal stretches of the round.
  for (int64_t j = 0; j < n; ++j) {
    in[static_cast<std::size_t>((2 * j + 1) * passes / (2 * n))] = true;
  }
  return in;
}

int64_t iterations_per_round(double round_seconds, double seconds_each) {
  if (!(round_seconds > 0) || !(seconds_each > 0)) return 1;
  const double n = std::ceil(round_seconds / seconds_each);
  return n >= 1000 ? 1000 : std::max<int64_t>(1, static_cast<int64_t>(n));
}

// The timing rounds (AblationOptions::rounds): every single-process row of `result` timed
// against the baseline in the same rounds; each row's time and time ratio replaced by the
// rounds' figures. A failure (one more experiment alive than memory allows) keeps the
// measurement's times and says why in `timing_error`.
void time_in_rounds(const std::string& config_path, const std::vector<std::string>& overrides,
                    int64_t rounds, double round_seconds,
                    const std::function<void(const std::string&)>& progress,
                    AblationResult& result) {
  std::vector<AblationRowResult*> timed;
  std::vector<std::vector<std::string>> row_overrides;
  std::vector<std::string> names;
  std::vector<int64_t> per_round;
  for (auto& row : result.rows) {
    if (row.ranks > 1) continue;
    timed.push_back(&row);
    // The memory measurement's pace (meter on, the row alone): enough meta-iterations that a
    // round of this row lasts about `round_seconds` (the rounds' pace, with every row alive,
    // can differ by tens of percent on a GPU).
    per_round.push_back(iterations_per_round(round_seconds, row.measured_seconds));
    std::vector<std::string> all = overrides;
    all.insert(all.end(), row.row.overrides.begin(), row.row.overrides.end());
    row_overrides.push_back(std::move(all));
    names.push_back(row.row.name);
  }
  if (timed.empty() || timed.front()->row.key != "baseline") return;
  result.rounds = rounds;
  TimedRounds times;
  try {
    times = time_interleaved(config_path, row_overrides, names, result.problem, rounds,
                             per_round, progress);
  } catch (const std::exception& e) {
    result.rounds = 0;
    // First, before what failed earlier (a baseline measured again for the rows of ranks).
    result.timing_error = std::string("the timing rounds failed: ") + e.what() +
                          (result.timing_error.empty() ? "" : "; " + result.timing_error);
    if (progress)
      progress("timing rounds failed, times are the measurement's: " + std::string(e.what()));
    return;
  }
  result.round_seconds = round_seconds;
  result.heap_reuse = times.heap_reuse;
  const std::vector<double>& base = times.seconds.front();
  for (std::size_t k = 0; k < timed.size(); ++k) {
    AblationRowResult& row = *timed[k];
    if (!times.errors[k].empty()) {
      // Out of the rounds: its time stays the measurement's, and the table says why.
      result.timing_error += (result.timing_error.empty() ? "" : "; ") + row.row.name +
                             " timed alone (not in the rounds): " + times.errors[k];
      continue;
    }
    row.round_seconds = times.seconds[k];
    row.round_iterations = per_round[k];
    row.seconds = median(row.round_seconds);
    std::vector<double> ratios;
    for (std::size_t r = 0; r < base.size(); ++r) ratios.push_back(row.round_seconds[r] / base[r]);
    row.time_ratio = median(ratios);
    row.time_ratio_low = *std::min_element(ratios.begin(), ratios.end());
    row.time_ratio_high = *std::max_element(ratios.begin(), ratios.end());
    if (times.plans[k] != row.plan) row.timing_plan = times.plans[k];
  }
}

std::vector<double> measure_bracket(const std::string& config_path,
                                    const std::vector<std::string>& base_overrides,
                                    const AblationOptions& options, const std::string& when,
                                    const std::function<void(const std::string&)>& progress,
                                    AblationResult& result) {
  if (progress) progress("      the baseline again, " + when);
  try {
    const auto base =
        measure_ablation_row(config_path, base_overrides, result.problem,
                             std::max(options.iterations(), options.rounds()));
    return std::vector<double>(base.iteration_seconds.begin(),
                               base.iteration_seconds.begin() + options.rounds());
  } catch (const std::exception& e) {
    if (progress) progress("      the baseline failed this time: " + std::string(e.what()));
    result.timing_error += (result.timing_error.empty() ? "" : "; ") +
                           std::string("the baseline measured again ") + when +
                           " failed: " + e.what();
    return {};
  }
}

// Rows of several ranks ran in processes of their own, with the meter on: their ratio is of the
// median of their first `rounds` metered meta-iterations and the baseline's, measured again just
// before and after the row (the baseline's first measurement where those are missing).
void time_own_processes(int64_t rounds, AblationResult& result) {
  if (result.rows.empty() || rounds < 1) return;
  const auto& base_metered = result.rows.front().iteration_seconds;
  const auto first = [rounds](const std::vector<double>& v) {
    return std::vector<double>(v.begin(), v.begin() + rounds);
  };
  for (auto& row : result.rows) {
    if (row.ranks <= 1 || static_cast<int64_t>(row.iteration_seconds.size()) < rounds) continue;
    std::vector<std::vector<double>> brackets;
    for (const auto* b : {&row.baseline_before_seconds, &row.baseline_after_seconds}) {
      if (static_cast<int64_t>(b->size()) >= rounds) brackets.push_back(first(*b));
    }
    if (brackets.empty() && static_cast<int64_t>(base_metered.size()) >= rounds)
      brackets.push_back(first(base_metered));
    if (brackets.empty()) continue;
    std::vector<double> pooled, medians;
    for (const auto& b : brackets) {
      pooled.insert(pooled.end(), b.begin(), b.end());
      medians.push_back(median(b));
    }
    const double reference = median(pooled);
    const std::vector<double> own = first(row.iteration_seconds);
    row.seconds = median(own);
    row.time_ratio = row.seconds / reference;
    row.time_ratio_low = *std::min_element(own.begin(), own.end()) /
                         *std::max_element(medians.begin(), medians.end());
    row.time_ratio_high = *std::max_element(own.begin(), own.end()) /
                          *std::min_element(medians.begin(), medians.end());
  }
}

}  // namespace detail
}  // namespace run
}  // namespace mlo
