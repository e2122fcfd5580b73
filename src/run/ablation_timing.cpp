// The ablation's timing rounds (ablation_detail.h: time_interleaved). Memory is measured one row
// at a time (run/ablation_measure.cpp); time is not, because a machine's load drifts: a row
// measured alone in a quiet minute looks faster than the baseline measured in a busy one. Here
// every row's experiment is alive at once and each round times one meta-iteration of each, so
// whatever the machine does between rounds, the rows of one round see nearly the same.
#include "ablation_detail.h"

#include <mlo/base/error.h>
#include <mlo/run/config.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace mlo {
namespace run {
namespace detail {

TimedRounds time_interleaved(const std::string& config_path,
                             const std::vector<std::vector<std::string>>& row_overrides,
                             const std::vector<std::string>& names, const std::string& problem,
                             int64_t rounds,
                             const std::function<void(const std::string&)>& progress) {
  MLO_CHECK(rounds >= 1, "ablation: rounds must be >= 1, got ", rounds);
  MLO_CHECK(names.size() == row_overrides.size(), "ablation: ", names.size(), " names for ",
            row_overrides.size(), " rows");
  struct Timed {
    std::unique_ptr<Experiment> experiment;
    Problem* problem = nullptr;
    int64_t steps = 1;  // global steps per meta-iteration
  };
  std::vector<Timed> rows;
  TimedRounds out;
  out.errors.assign(row_overrides.size(), "");
  for (std::size_t k = 0; k < row_overrides.size(); ++k) {
    if (progress) progress("timing: building and warming up " + names[k]);
    Timed t;
    try {
      t.experiment = make_experiment(
          load_run_config(config_path, measuring_overrides(row_overrides[k], false)));
      Engine& engine = t.experiment->engine();
      engine.initialize();
      for (const auto& p : engine.problems()) p->train();
      t.problem =
          t.experiment->problem(problem.empty() ? t.experiment->default_problem() : problem).get();
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
  for (int64_t r = 0; r < rounds; ++r) {
    std::string line =
        "timing: round " + std::to_string(r + 1) + "/" + std::to_string(rounds) + ":";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::size_t k = (i + static_cast<std::size_t>(r)) % rows.size();
      Timed& t = rows[k];
      if (!t.experiment) continue;
      Engine& engine = t.experiment->engine();
      double seconds = 0;
      try {
        synchronize(t.problem->device());
        const auto start = std::chrono::steady_clock::now();
        for (int64_t s = 0; s < t.steps; ++s) engine.step();
        synchronize(t.problem->device());
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } catch (const std::exception& e) {
        // As in the building above: the reference's failure ends the rounds, another row's
        // takes that row out of them (it keeps its measured time).
        if (k == 0) throw;
        out.errors[k] = e.what();
        if (progress) progress("timing: " + names[k] + " left out of the rounds: " + e.what());
        t = Timed();
        continue;
      }
      out.seconds[k][static_cast<std::size_t>(r)] = seconds;
      char part[96];
      std::snprintf(part, sizeof(part), " %s %.2f s;", names[k].c_str(), seconds);
      line += part;
    }
    if (progress) progress(line);
  }
  return out;
}

}  // namespace detail
}  // namespace run
}  // namespace mlo
