#include <mlo/core/engine.h>

#include "best_state.h"
#include "engine_nodes.h"
#include "level_runtime.h"

#include <mlo/base/archive.h>
#include <mlo/dist/process_group.h>
#include <mlo/core/method.h>
#include <mlo/core/metrics.h>
#include <mlo/core/path.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>

#include <spdlog/spdlog.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <typeinfo>
#include <cmath>
#include <sstream>

namespace mlo {
namespace {

std::string metric_names(const Metrics& metrics) {
  std::string out;
  for (const auto& item : metrics) out += (out.empty() ? "" : ", ") + item.first;
  return out;
}

}  // namespace

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

Engine& Engine::on_step(std::function<bool(int64_t)> hook) {
  on_step_ = std::move(hook);
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

void Engine::check_config(const Problem& problem) const {
  const ProblemConfig& c = problem.config();
  const std::string& name = problem.name();
  MLO_CHECK(problem.has_module(), "problem '", name, "': no module; call module(...)");
  MLO_CHECK(problem.has_optimizer(), "problem '", name, "': no optimizer; call optimizer(...)");
  // The range of every key, as the YAML reader checks it (ProblemConfig::visit); then the rules
  // across keys.
  {
    ProblemConfig copy = c;
    const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
    MLO_CHECK(failed.empty(), "problem '", name, "': ", failed);
  }
  MLO_CHECK(!(c.roll_back() && c.gradient_accumulation() > 1), "problem '", name,
            "': roll_back with gradient_accumulation > 1 is not supported (the redone step would ",
            "see one micro-batch)");
  const auto params = problem.module().parameters();
  const c10::DeviceType device = params.empty() ? c10::kCPU : params.front().device().type();
  MLO_CHECK(memory::precision_supported(c.precision(), device), "problem '", name, "': precision ",
            to_string(c.precision()), " cannot run on ", c10::DeviceTypeName(device),
            c.precision() == Precision::kFP16 ? " (fp16 needs a CUDA device and a CUDA build of "
                                                "mlo; on CPU use bf16)"
                                              : " (needs a CUDA build of mlo)");
  if (c.precision() == Precision::kBF16 && device == c10::kCPU && !memory::cpu_has_native_bf16()) {
    // (once per process: every level and every engine of a program would say the same)
    static bool warned = false;
    if (!warned) {
      warned = true;
      spdlog::warn("problem '{}': precision bf16 on a CPU without native bf16 ({}): LibTorch "
                   "converts to fp32 inside every kernel, so expect bf16 levels to run several "
                   "times slower than fp32 (up to an order of magnitude) and to save little "
                   "memory or none; fp32 is the better choice on this machine",
                   name, memory::cpu_bf16_shortfall());
    }
  }
  // NOTE: optimal and min_memory pick segments by each rank's own measured block times; under
  // zero3 two ranks could pick different plans, whose gathers (3 per checkpointed block, 2 per
  // stored one) would not pair up.
  MLO_CHECK(!(config_.strategy() == dist::Strategy::kZero3 && c.data_parallel() &&
              (c.checkpointing().strategy() == Checkpointing::kOptimal ||
               c.checkpointing().strategy() == Checkpointing::kMinMemory)),
            "problem '", name, "': checkpointing ", to_string(c.checkpointing().strategy()),
            " plans from this rank's own block timings, which under strategy zero3 could differ "
            "between ranks (and so would their collectives); use uniform or sqrt");
  if (c.offload() == Offload::kCpu) {
    MLO_CHECK(config_.strategy() == dist::Strategy::kZero3 && c.data_parallel() &&
                  dynamic_cast<const nn::ChainImpl*>(&problem.module()) != nullptr,
              "problem '", name, "': offload cpu moves the parameter shards of strategy zero3, ",
              "which needs engine.strategy zero3, data_parallel true and an mlo::nn::Chain model ",
              "(this run: strategy ", dist::to_string(config_.strategy()),
              c.data_parallel() ? "" : ", data_parallel false", ")");
    MLO_CHECK(device == c10::kCUDA, "problem '", name, "': offload cpu keeps the parameter ",
              "shards in host memory away from a GPU, but this problem's parameters are on ",
              c10::DeviceTypeName(device, /*lower_case=*/true),
              " already (use device cuda, or offload none)");
  }
  try {
    memory::validate_options(c.checkpointing());
    // The method is built once, so that bad options fail at start also on a problem that is no
    // hop of any path.
    check_options(c.method());
    c.method().make();
  } catch (const Error& e) {
    throw Error("problem '" + name + "': " + e.what());
  }
}

void Engine::check_method(const detail::EngineNode& node) const {
  if (node.method == nullptr) return;
  const Problem& p = *node.problem;
  const auto shards = [this](const Problem& q) {
    // (under zero3 every run has a group, of one rank at least)
    return config_.strategy() == dist::Strategy::kZero3 &&
           q.config().data_parallel() && q.has_module() &&
           dynamic_cast<const nn::ChainImpl*>(&q.module()) != nullptr;
  };
  MethodContext context{p, node.parents.size(), nodes_->has_paths(&p), config_.strategy(),
                        p.config().data_parallel(), shards(p), {}};
  for (const size_t prev : node.hop_parents) {
    context.parent_problems.push_back(nodes_->at(prev).problem);
  }
  try {
    node.method->check(context);
    if (node.method->second_order()) {
      std::vector<const Problem*> involved{&p};
      for (const size_t parent : node.parents) involved.push_back(nodes_->at(parent).problem);
      for (const Problem* q : involved) {
        MLO_CHECK(!shards(*q), p.config().method().name(), " differentiates the loss of '",
                  p.name(), "' twice, through the parameters of '", q->name(),
                  "', which strategy zero3 shards (a unit's all-gather is differentiated once ",
                  "only); use darts or sama, or set data_parallel false for '", q->name(), "'");
      }
    }
  } catch (const Error& e) {
    throw Error("problem '" + p.name() + "': " + e.what());
  }
}

void Engine::link_handles() {
  std::string names;
  for (const auto& problem : problems_) names += (names.empty() ? "" : ", ") + problem->name();
  for (const auto& problem : problems_) {
    for (detail::HandleBase* handle : problem->handles_) {
      const std::string owner = "problem '" + problem->name() + "': its handle ";
      if (!handle->target().empty()) {
        const auto found =
            std::find_if(problems_.begin(), problems_.end(),
                         [&](const ProblemPtr& p) { return p->name() == handle->target(); });
        MLO_CHECK(found != problems_.end(), owner, "to '", handle->target(), "' (",
                  handle->type_name(), ") names no problem of this engine (its problems: ", names,
                  "); add that problem, or correct the name");
        MLO_CHECK(handle->accepts(**found), owner, "to '", handle->target(), "' wants a ",
                  handle->type_name(), ", but problem '", handle->target(), "' is a ",
                  detail::demangled(typeid(**found)));
        handle->link(found->get());
        continue;
      }
      std::vector<Problem*> matches;
      for (const auto& p : problems_) {
        if (p.get() != problem.get() && handle->accepts(*p)) matches.push_back(p.get());
      }
      std::string found_names;
      for (const Problem* p : matches) found_names += (found_names.empty() ? "" : ", ") + p->name();
      MLO_CHECK(!matches.empty(), owner, "to a ", handle->type_name(),
                " finds no such problem in this engine (its problems: ", names, ")");
      MLO_CHECK(matches.size() == 1, owner, "to a ", handle->type_name(), " finds several (",
                found_names, "); name the one it means: Handle<", handle->type_name(),
                ">{this, \"", matches.front()->name(), "\"}");
      handle->link(matches.front());
    }
  }
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
  if (config_.early_stopping().enabled()) {
    MLO_CHECK(config_.valid_step() > 0 && validation_,
              "engine: early_stopping needs valid_step > 0",
              " and a validation hook (engine.validation(...))");
  }
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
  if (!node.checked && !step.redo) {
    context.inputs = &node.inputs;
    node.checked = true;
  }
  node.level->step(context);
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
  while (global_step_ < config_.train_iters() && !stopped_early_) {
    step();
    // Rank 0 validates and decides about early stopping (the other ranks' parameters are the
    // same); the decision reaches every rank below, so that all stop at the same step. (Under
    // zero3 every rank validates: see validates_here.)
    if (config_.valid_step() > 0 && validation_ && global_step_ % config_.valid_step() == 0 &&
        validates_here()) {
      validate_and_maybe_stop();
    }
    const bool go_on = !on_step_ || on_step_(global_step_);
    if (!agree_to_go_on(go_on)) break;
  }
  for (const auto& level : levels_) {
    const std::string sharding = level->sharding_summary();
    if (!sharding.empty()) spdlog::info("mlo: {}", sharding);
  }
}

void Engine::validate_and_maybe_stop() {
  for (const auto& problem : problems_) problem->eval();
  last_validation_ = validation_();
  for (const auto& problem : problems_) problem->train();
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
