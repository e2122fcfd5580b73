// Validation, early stopping and the engine's log lines: the validation hook every valid_step
// global steps (Engine::validate_and_maybe_stop, which also hands the metrics to the callbacks),
// once more after training (Engine::validate), and a final evaluation (Engine::evaluate).
#include <mlo/core/engine.h>

#include <mlo/base/error.h>

#include "best_state.h"
#include "level_runtime.h"

#include <mlo/dist/process_group.h>
#include <mlo/core/metrics.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace mlo {
namespace {

std::string metric_names(const Metrics& metrics) {
  std::string out;
  for (const auto& item : metrics) out += (out.empty() ? "" : ", ") + item.first;
  return out;
}

}  // namespace

Metrics Engine::in_eval_mode(const std::function<Metrics()>& body) {
  struct TrainAgain {
    const std::vector<ProblemPtr>& problems;
    ~TrainAgain() {
      for (const auto& problem : problems) problem->train();
    }
  };
  for (const auto& problem : problems_) problem->eval();
  TrainAgain again{problems_};
  Metrics metrics;
  try {
    metrics = body();
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemory("", c10::str("evaluating after global step ", global_step_,
                                   ": out of memory (LibTorch: ", first_line(e),
                                   "): an evaluation batch or a model does not fit; lower "
                                   "its size (docs/memory.md)"));
  }
  // (a diverged model evaluates to NaN, which the console shows as one number among others)
  for (const auto& [name, value] : metrics) {
    if (!std::isfinite(value)) {
      spdlog::warn("mlo: evaluated after global step {}, {} is {}: what it measures diverged",
                   global_step_, name, format_metric(value));
    }
  }
  return metrics;
}

std::optional<Metrics> Engine::validate(const std::string& title) {
  if (!validation_) return std::nullopt;
  if (!validating_rank()) return Metrics{};
  const Metrics metrics = in_eval_mode(validation_);
  if (!title.empty()) {
    std::vector<std::string> headline = validation_headline_;
    if (headline.empty()) {
      for (const auto& item : metrics) headline.push_back(item.first);
    }
    for (const auto& line : console_lines(title + ": " + format_headline(metrics, headline))) {
      spdlog::info("{}", line);
    }
  }
  return metrics;
}

Metrics Engine::evaluate(const std::function<Metrics()>& hook) {
  MLO_CHECK(hook != nullptr, "engine: evaluate(...) got an empty function");
  if (!validating_rank()) return {};
  return in_eval_mode(hook);
}

void Engine::validate_and_maybe_stop() {
  last_validation_ = in_eval_mode(validation_);
  for (const auto& [name, value] : memory_metrics()) last_validation_.emplace(name, value);
  std::vector<std::string> headline = validation_headline_;
  if (headline.empty()) {
    for (const auto& item : last_validation_) headline.push_back(item.first);
  }
  const std::optional<EarlyStopping> rule =
      config_.early_stopping().enabled() ? std::optional<EarlyStopping>(config_.early_stopping())
                                         : std::nullopt;
  if (rule && std::count(headline.begin(), headline.end(), rule->metric()) == 0) {
    headline.push_back(rule->metric());
  }
  const std::string validation = "[validation] step " + std::to_string(global_step_) + "  " +
                                 format_headline(last_validation_, headline);
  for (const auto& line : console_lines(validation)) spdlog::info("{}", line);
  spdlog::debug("[validation] step {}  {}", global_step_, format_all(last_validation_));
  const Validation event{global_step_, last_validation_, headline};
  for (const auto& callback : callbacks_) callback->on_validation(*this, event);

  if (!rule) return;
  const auto found = last_validation_.find(rule->metric());
  MLO_CHECK(found != last_validation_.end(), "engine: early_stopping metric '", rule->metric(),
            "' is not among the validation metrics (", metric_names(last_validation_), ")");
  double value = found->second;
  const bool every_rank = std::any_of(levels_.begin(), levels_.end(), [](const auto& level) {
    return level->shards_parameters();
  });
  if (group_ && every_rank) {
    // (every rank validates under zero3: rank 0's value decides on all of them, so that every
    // rank keeps its shards of the same best state)
    at::Tensor shared = at::full({1}, is_main() ? value : 0.0, at::kDouble);
    const c10::Device device = problems_.front()->device();
    if (!device.is_cpu()) shared = shared.to(device);
    group_->all_reduce_sum({shared});
    value = shared.cpu().item<double>();
  }
  const bool improved =
      !best_metric_ || (rule->mode() == Mode::kMin ? value < *best_metric_ - rule->min_delta()
                                                   : value > *best_metric_ + rule->min_delta());
  if (improved) {
    best_metric_ = value;
    validations_without_improvement_ = 0;
    if (rule->restore_best()) {
      if (!best_state_) best_state_ = std::make_unique<detail::BestState>();
      best_state_->capture(problems_, global_step_);
    }
    return;
  }
  if (++validations_without_improvement_ >= rule->tolerance()) {
    stopped_early_ = true;
    const std::string stop = "mlo: early stopping at step " + std::to_string(global_step_) +
                             ": '" + rule->metric() + "' has not improved on " +
                             format_metric(*best_metric_) + " for " +
                             std::to_string(validations_without_improvement_) + " validations";
    for (const auto& line : console_lines(stop)) spdlog::info("{}", line);
  }
}

// NOTE: the console line holds the problem's headline metrics only (within 120 characters,
// wrapped where a program declares many); every metric reaches the run's metrics files
// (cli/runner.cpp), and the debug level here.
void Engine::log_problem(const Problem& p) const {
  const std::string step = "[step " + std::to_string(global_step_) + "] " + p.name() +
                           "  local " + std::to_string(p.step_count()) + "  " +
                           format_headline(p.metrics(), p.headline_metrics());
  for (const auto& line : console_lines(step)) spdlog::info("{}", line);
  spdlog::debug("[step {}] {}  local {}  {}", global_step_, p.name(), p.step_count(),
                format_all(p.metrics()));
}

}  // namespace mlo
