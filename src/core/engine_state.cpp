// The engine's saved state (Engine::state_dict, load_state_dict) and the best validation's
// parameters kept with it (Engine::restore_best).
#include <mlo/core/engine.h>
#include "best_state.h"
#include "engine_nodes.h"
#include <mlo/base/archive.h>
#include <mlo/core/method.h>
#include <torch/serialize/archive.h>

namespace mlo {

void Engine::state_dict(torch::serialize::OutputArchive& archive) const {
  archive.write("global_step", c10::IValue(global_step_));
  archive.write("stopped_early", c10::IValue(stopped_early_));
  archive.write("has_best", c10::IValue(best_metric_.has_value()));
  archive.write("best_metric", c10::IValue(best_metric_.value_or(0.0)));
  archive.write("without_improvement", c10::IValue(validations_without_improvement_));
  archive.write("world_size", c10::IValue(static_cast<int64_t>(world_size())));
  archive.write("partial_window", c10::IValue(partial_window()));
  archive.write("strategy", c10::IValue(std::string(dist::to_string(config_.strategy()))));
  if (best_state_) {
    torch::serialize::OutputArchive best;
    best_state_->save(best);
    archive.write("best_state", best);
  }
  for (const auto& problem : problems_) {
    torch::serialize::OutputArchive sub;
    problem->state_dict(sub);
    archive.write("problem." + problem->name(), sub);
  }
  if (environment_) {
    torch::serialize::OutputArchive sub;
    environment_->save(sub);
    archive.write("environment", sub);
  }
  for (const auto& callback : callbacks_) {
    const std::string name = callback->state_name();
    if (name.empty()) continue;
    torch::serialize::OutputArchive sub;
    callback->save(sub);
    archive.write("callback." + name, sub);
  }
  if (nodes_) {
    torch::serialize::OutputArchive sub;
    nodes_->schedule().save(sub, nodes_->names());
    archive.write("schedule", sub);
    for (const auto& node : nodes_->nodes()) {
      if (node->method == nullptr) continue;
      torch::serialize::OutputArchive method;
      method.write("name", c10::IValue(node->problem->config().method().name()));
      node->method->save(method);
      archive.write("method." + node->problem->name(), method);
    }
  }
}

void Engine::load_state_dict(torch::serialize::InputArchive& archive) {
  initialize();
  const std::string owner = "engine";
  global_step_ = mlo::archive::read_int(archive, "global_step", owner);
  stopped_early_ = mlo::archive::read_bool(archive, "stopped_early", owner);
  const bool has_best = mlo::archive::read_bool(archive, "has_best", owner);
  const double best = mlo::archive::read_double(archive, "best_metric", owner);
  best_metric_ = has_best ? std::optional<double>(best) : std::nullopt;
  validations_without_improvement_ = mlo::archive::read_int(archive, "without_improvement", owner);
  check_resumable(archive);
  // A best state is kept only while this run asks for it: a resume with restore_best off (or
  // without early stopping) neither restores nor keeps the saved one. Only rank 0 validates
  // (every rank under zero3), so only it keeps one.
  best_state_.reset();
  torch::serialize::InputArchive best_state;
  const bool wanted =
      config_.early_stopping().enabled() && config_.early_stopping().restore_best() &&
      validating_rank();
  if (wanted && archive.try_read("best_state", best_state)) {
    best_state_ = std::make_unique<detail::BestState>();
    best_state_->load(best_state, problems_);
  }
  for (const auto& problem : problems_) {
    torch::serialize::InputArchive sub;
    MLO_CHECK(archive.try_read("problem." + problem->name(), sub), "engine state: no state for ",
              "problem '", problem->name(), "' (saved from a different experiment?)");
    problem->load_state_dict(sub);
  }
  if (environment_) {
    torch::serialize::InputArchive sub;
    MLO_CHECK(archive.try_read("environment", sub),
              "engine state: no state for the environment (saved by an engine without one?)");
    environment_->load(sub);
  }
  for (const auto& callback : callbacks_) {
    const std::string name = callback->state_name();
    torch::serialize::InputArchive sub;
    // (a callback added after the state was saved keeps its initial state)
    if (name.empty() || !archive.try_read("callback." + name, sub)) continue;
    try {
      callback->load(sub);
    } catch (const Error& e) {
      throw Error("engine state: callback '" + name + "': " + e.what());
    }
  }
  torch::serialize::InputArchive schedule;
  MLO_CHECK(archive.try_read("schedule", schedule),
            "engine state: no schedule (saved by an older version of mlo?)");
  std::vector<int64_t> local, optimizer;
  for (const auto& node : nodes_->nodes()) {
    local.push_back(node->problem->step_count());
    optimizer.push_back(node->problem->optimizer_steps());
  }
  nodes_->schedule().load(schedule, nodes_->names(), local, optimizer);
  for (const auto& node : nodes_->nodes()) {
    torch::serialize::InputArchive method;
    // NOTE: absent from states saved before methods kept state; they start afresh.
    if (node->method == nullptr || !archive.try_read("method." + node->problem->name(), method)) {
      continue;
    }
    const std::string now = node->problem->config().method().name();
    c10::IValue saved;
    MLO_CHECK(method.try_read("name", saved) && saved.toStringRef() == now, "engine state: ",
              "problem '", node->problem->name(), "' was saved with hypergradient method '",
              saved.isString() ? saved.toStringRef() : std::string("?"), "', this run uses '", now,
              "'; resume with the saved method, or start a new run");
    try {
      node->method->load(method);
    } catch (const Error& e) {
      throw Error("engine state: problem '" + node->problem->name() + "': " + e.what());
    }
  }
}

int64_t Engine::restore_best() {
  const bool wanted = config_.early_stopping().enabled() && config_.early_stopping().restore_best();
  return wanted && best_state_ && best_state_->restore(problems_) ? best_state_->step() : -1;
}

}  // namespace mlo
