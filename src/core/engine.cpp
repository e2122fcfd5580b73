// The engine's lifecycle: problems and edges, initialization, the global step and the run
// loop with its callbacks. Its checks of a setup are engine_checks.cpp, validation and early
// stopping engine_validation.cpp, its state engine_state.cpp, data parallelism
// engine_parallel.cpp.
#include <mlo/core/engine.h>

#include "best_state.h"
#include "engine_nodes.h"
#include "level_runtime.h"

#include <mlo/dist/process_group.h>
#include <mlo/core/metrics.h>
#include <mlo/core/path.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace mlo {

Engine::Engine(EngineConfig config) : config_(std::move(config)) {}

Engine::Engine(EngineConfig config, std::vector<ProblemPtr> problems,
               const Dependencies& dependencies)
    : Engine(std::move(config)) {
  for (auto& problem : problems) add(std::move(problem));
  for (const auto& [upper, lowers] : dependencies.u2l) {
    for (const auto& lower : lowers) u2l(upper, lower);
  }
  for (const auto& [lower, uppers] : dependencies.l2u) {
    for (const auto& upper : uppers) l2u(lower, upper);
  }
}

Engine::~Engine() = default;

Level& Engine::level(const Problem& problem) {
  MLO_CHECK(initialized_, "engine: level('", problem.name(), "') before initialization");
  for (const auto& level : levels_) {
    if (&level->problem() == &problem) return *level;
  }
  throw Error("engine: problem '" + problem.name() + "' is not one of this engine's problems");
}

Engine& Engine::add(ProblemPtr problem) {
  MLO_CHECK(!initialized_, "engine: add(...) after initialization");
  graph_.add(problem.get());
  problems_.push_back(std::move(problem));
  return *this;
}

Engine& Engine::u2l(const ProblemPtr& upper, const ProblemPtr& lower) {
  MLO_CHECK(!initialized_, "engine: u2l(...) after initialization");
  graph_.add_u2l(upper.get(), lower.get());
  return *this;
}

Engine& Engine::l2u(const ProblemPtr& lower, const ProblemPtr& upper) {
  MLO_CHECK(!initialized_, "engine: l2u(...) after initialization");
  graph_.add_l2u(lower.get(), upper.get());
  return *this;
}

Engine& Engine::link(const ProblemPtr& upper, const ProblemPtr& lower) {
  return u2l(upper, lower).l2u(lower, upper);
}

Engine& Engine::validation(std::function<Metrics()> hook, std::vector<std::string> headline) {
  validation_ = std::move(hook);
  validation_headline_ = std::move(headline);
  return *this;
}

Engine& Engine::add_callback(std::shared_ptr<Callback> callback) {
  MLO_CHECK(!running_, "engine: add_callback(...) while the engine runs (add it before run())");
  MLO_CHECK(callback != nullptr, "engine: add_callback(...) got a null callback");
  const std::string name = callback->state_name();
  for (const auto& other : callbacks_) {
    MLO_CHECK(other != callback, "engine: add_callback(...): that callback was added already");
    MLO_CHECK(name.empty() || other->state_name() != name, "engine: two callbacks save their ",
              "state under the name '", name, "' (Callback::state_name must differ)");
  }
  callbacks_.push_back(std::move(callback));
  return *this;
}

Engine& Engine::remove_callback(const Callback& callback) {
  MLO_CHECK(!running_, "engine: remove_callback(...) while the engine runs");
  callbacks_.erase(std::remove_if(callbacks_.begin(), callbacks_.end(),
                                  [&](const auto& c) { return c.get() == &callback; }),
                   callbacks_.end());
  return *this;
}

Engine& Engine::environment(std::shared_ptr<Environment> environment) {
  MLO_CHECK(!initialized_, "Engine::environment: set the environment before the engine starts");
  MLO_CHECK(environment, "Engine::environment: the environment is null");
  MLO_CHECK(!environment_ || environment_ == environment,
            "Engine::environment: the engine has an environment already (one per engine)");
  environment_ = std::move(environment);
  return *this;
}

void Engine::initialize() {
  if (initialized_) return;
  graph_.validate();
  link_handles();
  {
    EngineConfig copy = config_;
    const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
    MLO_CHECK(failed.empty(), "engine: ", failed);
  }
  if (const auto broken = config_.validate()) {
    throw Error("engine: " + broken->key + ": " + broken->what);
  }
  MLO_CHECK(!config_.early_stopping().enabled() || validation_,
            "engine: early_stopping needs a validation hook (engine.validation(...))");
  for (const auto& problem : problems_) check_config(*problem);
  nodes_ = std::make_unique<detail::EngineNodes>(graph_, config_.log_step());
  MLO_CHECK(!nodes_->schedule().leaves().empty(),
            "engine: no leaf problem (every problem has a problem below it)");
  for (const auto& node : nodes_->nodes()) check_method(*node);
  connect();
  if (config_.track_memory()) {
    const auto params = problems_.front()->module().parameters();
    meter_ = std::make_unique<memory::MemoryMeter>(params.empty() ? c10::Device(c10::kCPU)
                                                                  : params.front().device());
  }
  if (group_) {
    // Every rank starts from rank 0's parameters and buffers (whatever each rank's seed drew);
    // before resolve, which under zero3 shards the parameters.
    std::vector<at::Tensor> state;
    for (const auto& problem : problems_) {
      if (problem->zero3_) continue;  // (a problem an earlier engine sharded)
      for (const auto& p : problem->module().parameters()) state.push_back(p);
      for (const auto& b : problem->module().buffers()) state.push_back(b);
    }
    group_->broadcast(state, /*root=*/0);
    spdlog::info("mlo: rank {} of {}, strategy {}", group_->rank(), group_->size(),
                 dist::to_string(config_.strategy()));
  }
  std::vector<Problem*> all;
  for (const auto& problem : problems_) all.push_back(problem.get());
  levels_.clear();
  for (const auto& problem : problems_) {
    levels_.push_back(std::make_unique<detail::LevelRuntime>(*problem, meter_.get(), all, group_,
                                                             config_.strategy()));
    nodes_->node(problem.get()).level = levels_.back().get();
    // Planned lazily, on the model's first forward (it needs a real batch to profile).
    auto plan = memory::configure_checkpointing(problem->module(), problem->name(),
                                                problem->config().checkpointing());
    if (plan) checkpoint_plans_[problem.get()] = std::move(plan);
  }
  nodes_->make_paths();
  for (const auto& node : nodes_->nodes()) {
    std::string paths;
    for (const auto& path : node->paths) paths += " [" + path.describe() + "]";
    spdlog::debug("mlo: problem '{}': {} parent(s), {} child(ren), paths:{}",
                  node->problem->name(), node->parents.size(),
                  graph_.children(node->problem).size(),
                  paths.empty() ? " none" : paths);
  }
  initialized_ = true;
}

void Engine::step_problem(const Schedule::Step& step) {
  detail::EngineNode& node = nodes_->at(step.level);
  Problem& p = *node.problem;
  detail::StepContext context;
  context.paths = &node.paths;
  context.unroll_start = step.unroll_start;
  context.redo = step.redo;
  context.method = node.method;
  context.global_step = global_step_;
  if (!node.checked && !step.redo) {
    context.inputs = &node.inputs;
    node.checked = true;
  }
  try {
    node.level->step(context);
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemory(p.name(),
                      c10::str("problem '", p.name(), "', global step ", global_step_,
                               ": out of memory (LibTorch: ", first_line(e),
                               "): the step, with the problems its loss calls, does not "
                               "fit; lower a model's size or a batch size, or see "
                               "docs/memory.md for accumulation, checkpointing and lower "
                               "precision"));
  }
  if (!step.redo && node.log_step > 0 && p.step_count() % node.log_step == 0) log_problem(p);
}

void Engine::step() {
  if (!initialized_) initialize();
  ++global_step_;
  if (environment_) environment_->step(global_step_);
  const auto take = [this](const Schedule::Step& step) { step_problem(step); };
  if (!meter_) {
    nodes_->schedule().global_step(take);
    return;
  }
  memory::MemoryMeter::Active metering(*meter_);
  auto scope = meter_->scope("engine", "iteration");
  nodes_->schedule().global_step(take);
  last_step_peak_ = scope.close();
}

const memory::CheckpointPlan* Engine::checkpoint_plan(const Problem& problem) const {
  const auto it = checkpoint_plans_.find(&problem);
  if (it == checkpoint_plans_.end() || !it->second->plan) return nullptr;
  return &*it->second->plan;
}

Metrics Engine::memory_metrics() const {
  Metrics out;
  if (!meter_) return out;
  for (const auto& [key, stats] : meter_->stats()) {
    if (key.second == "total") out["mem_peak_mb/" + key.first] = memory::to_mib(stats.last_peak);
  }
  out["mem_peak_mb/iteration"] = memory::to_mib(last_step_peak_);
  return out;
}

void Engine::run() {
  initialize();
  for (const auto& problem : problems_) problem->train();
  spdlog::info("mlo: running {} global steps over {} problem(s)", config_.train_iters(),
               problems_.size());
  struct Running {
    bool& flag;
    explicit Running(bool& f) : flag(f) { flag = true; }
    ~Running() { flag = false; }
  } running(running_);
  for (const auto& callback : callbacks_) callback->on_start(*this);
  StepEnd last{global_step_, resumable_now()};
  while (global_step_ < config_.train_iters() && !stopped_early_) {
    step();
    // Rank 0 validates and decides about early stopping (the other ranks' parameters are the
    // same); the decision reaches every rank below, so that all stop at the same step. (Under
    // zero3 every rank validates: see validating_rank.)
    if (config_.valid_step() > 0 && validation_ && global_step_ % config_.valid_step() == 0 &&
        validating_rank()) {
      validate_and_maybe_stop();
    }
    last = StepEnd{global_step_, resumable_now()};
    bool finish = false, pause = false;
    for (const auto& callback : callbacks_) {
      const StepDecision decision = callback->on_step_end(*this, last);
      finish = finish || decision == StepDecision::kFinish;
      pause = pause || decision == StepDecision::kPause;
    }
    if (!agree_to_go_on(finish, pause)) break;
  }
  for (const auto& callback : callbacks_) callback->on_end(*this, last);
  for (const auto& level : levels_) {
    const std::string sharding = level->sharding_summary();
    if (!sharding.empty()) spdlog::info("mlo: {}", sharding);
  }
}

}  // namespace mlo
