#include <mlo/run/builders.h>

#include <mlo/base/error.h>
#include <mlo/run/device.h>

#include <torch/optim.h>

#include <algorithm>
#include <functional>
#include <cmath>

namespace mlo {
namespace run {

void check_name(const std::string& name, const std::vector<std::string>& valid,
                const std::string& what, const std::string& key) {
  if (std::find(valid.begin(), valid.end(), name) != valid.end()) return;
  std::string names;
  for (const auto& v : valid) names += (names.empty() ? "" : ", ") + v;
  throw Error(key + ": unknown " + what + " '" + name + "'; valid names: " + names);
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c,
                                                        torch::nn::Module& module,
                                                        const std::string& key) {
  check_name(c.name, optimizer_names(), "optimizer", key + ".optimizer.name");
  std::vector<at::Tensor> params;
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  if (c.name == "sgd") {
    return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(c.lr)
                                                           .momentum(c.momentum)
                                                           .weight_decay(c.weight_decay)
                                                           .nesterov(c.nesterov));
  }
  if (c.name == "adam") {
    return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(c.lr)
                                                            .betas({c.beta1, c.beta2})
                                                            .eps(c.eps)
                                                            .weight_decay(c.weight_decay));
  }
  MLO_CHECK(c.name == "adamw", "optimizer: unknown optimizer '", c.name, "'; valid names: ",
            c10::Join(", ", optimizer_names()));
  return std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(c.lr)
                                                           .betas({c.beta1, c.beta2})
                                                           .eps(c.eps)
                                                           .weight_decay(c.weight_decay));
}

LrSchedule make_schedule(const SchedulerConfig& c, int64_t total_steps, const std::string& key) {
  check_name(c.name, scheduler_names(), "scheduler", key + ".scheduler.name");
  if (c.name == "multistep") {
    std::vector<int64_t> milestones = c.milestones;
    std::sort(milestones.begin(), milestones.end());
    const double gamma = c.gamma;
    return [milestones, gamma](int64_t step) {
      const auto passed =
          std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
      return std::pow(gamma, static_cast<double>(passed));
    };
  }
  if (c.name == "cosine") {
    const int64_t period = std::max<int64_t>(1, c.t_max > 0 ? c.t_max : total_steps);
    const double floor = c.eta_min;
    return [period, floor](int64_t step) {
      const double t = static_cast<double>(std::min(step, period)) / static_cast<double>(period);
      return floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * t));
    };
  }
  MLO_CHECK(c.name == "none", "scheduler: unknown scheduler '", c.name, "'; valid names: ",
            c10::Join(", ", scheduler_names()));
  return nullptr;
}

ProblemConfig make_problem_config(const ProblemSettings& s, const std::string& key) {
  ProblemConfig c;
  c.unroll_steps(s.unroll_steps)
      .warmup_steps(s.warmup_steps)
      .roll_back(s.roll_back)
      .gradient_clipping(s.gradient_clipping)
      .gradient_accumulation(s.gradient_accumulation)
      .log_step(s.log_step)
      .data_parallel(s.data_parallel)
      .allow_unused_parameters(s.allow_unused_parameters);
  c.precision(from_string<Precision>(s.precision, key + ".precision"));
  c.offload(from_string<Offload>(s.offload, key + ".offload"));
  c.checkpointing(s.checkpointing);  // validated by the planner, where it is used
  try {
    c.method(*method_options(s, s.method));
  } catch (const Error& e) {
    throw Error(key + ".method: " + e.what());
  }
  return c;
}

std::map<std::string, int64_t> optimizer_steps(const RunConfig& config) {
  // NOTE: counts by replaying the engine's schedule on integers (Engine::step_problem): exact
  // also for a problem above several children with different periods.
  const DependencyConfig graph = resolved_dependencies(config);
  struct Node {
    int64_t steps = 0;       // local steps
    int64_t optimizer = 0;   // optimizer steps (what the learning-rate schedule sees)
    int64_t unroll_start = 0;  // optimizer steps when the current unroll started
    int64_t period = 1;
    int64_t accumulation = 1;
    int64_t warmup = 0;
    bool roll_back = false;
    std::vector<size_t> parents;
    std::vector<size_t> children;
    std::vector<bool> ready;
  };
  std::vector<std::string> names;
  std::map<std::string, size_t> index;
  for (const auto& [name, settings] : config.problems) {
    index[name] = names.size();
    names.push_back(name);
  }
  std::vector<Node> nodes(names.size());
  for (const auto& [name, settings] : config.problems) {
    Node& n = nodes[index[name]];
    n.accumulation = std::max<int64_t>(1, settings.gradient_accumulation);
    n.period = std::max<int64_t>(1, settings.unroll_steps) * n.accumulation;
    n.warmup = settings.warmup_steps;
    n.roll_back = settings.roll_back;
    for (const auto& parent : parents_of(graph, name)) {
      const auto found = index.find(parent);
      if (found == index.end()) continue;  // reported by check_config
      n.parents.push_back(found->second);
      nodes[found->second].children.push_back(index[name]);
    }
  }
  for (auto& n : nodes) n.ready.assign(n.children.size(), false);
  std::function<void(size_t)> step = [&](size_t i) {
    Node& n = nodes[i];
    for (const bool r : n.ready) {
      if (!r) return;
    }
    ++n.steps;
    if (n.steps % n.accumulation == 0) ++n.optimizer;
    if (n.steps % n.period == 0) {
      if (n.steps > n.warmup) {
        for (const size_t parent : n.parents) {
          Node& p = nodes[parent];
          const auto it = std::find(p.children.begin(), p.children.end(), i);
          p.ready[static_cast<size_t>(it - p.children.begin())] = true;
          step(parent);
        }
        // Roll-back restores the state from the unroll's start and steps once again: the
        // schedule sees one optimizer step per unroll (Problem's redo).
        if (n.roll_back) n.optimizer = n.unroll_start + 1;
      }
      n.unroll_start = n.optimizer;
    }
    n.ready.assign(n.ready.size(), false);
  };
  for (int64_t t = 0; t < config.engine.train_iters; ++t) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].children.empty()) step(i);
    }
  }
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < nodes.size(); ++i) out[names[i]] = nodes[i].optimizer;
  return out;
}

void setup_problem(Problem& problem, const RunConfig& config) {
  const std::string& name = problem.name();
  const auto found = config.problems.find(name);
  MLO_CHECK(found != config.problems.end(), "setup_problem: no problems.", name,
            " in the configuration");
  const ProblemSettings& settings = found->second;
  const std::string key = "problems." + name;
  place_problem(problem, config);  // before the optimizer lists the parameters
  problem.optimizer(make_optimizer(settings.optimizer, problem.module(), key));
  if (auto schedule = make_schedule(settings.scheduler, optimizer_steps(config).at(name), key)) {
    problem.scheduler(std::move(schedule));
  }
}

void add_problems(Engine& engine, const RunConfig& config,
                  const std::vector<ProblemPtr>& problems) {
  std::map<std::string, ProblemPtr> by_name;
  for (const auto& problem : problems) {
    place_problem(*problem, config);  // also a module `setup_problem` did not see
    engine.add(problem);
    by_name[problem->name()] = problem;
  }
  const auto find = [&](const std::string& name, const std::string& key) {
    const auto found = by_name.find(name);
    if (found != by_name.end()) return found->second;
    std::string names;
    for (const auto& entry : by_name) names += (names.empty() ? "" : ", ") + entry.first;
    config.fail(key, "names problem '" + name + "', which this " + config.experiment +
                         " run does not build (its problems: " + names + ")");
  };
  // A configured problem the experiment did not build would have its keys validated and then
  // ignored.
  for (const auto& entry : config.problems) {
    if (by_name.count(entry.first)) continue;
    std::string names;
    for (const auto& built : by_name) names += (names.empty() ? "" : ", ") + built.first;
    config.fail("problems." + entry.first, "is configured, but this " + config.experiment +
                                               " run builds no problem of that name (it builds: " +
                                               names + ")");
  }
  const DependencyConfig graph = resolved_dependencies(config);
  for (const auto& [upper, lowers] : graph.u2l) {
    for (const auto& lower : lowers) {
      engine.u2l(find(upper, "dependencies.u2l"), find(lower, "dependencies.u2l." + upper));
    }
  }
  for (const auto& [lower, uppers] : graph.l2u) {
    for (const auto& upper : uppers) {
      engine.l2u(find(lower, "dependencies.l2u"), find(upper, "dependencies.l2u." + lower));
    }
  }
}

EngineConfig make_engine_config(const EngineSettings& settings) {
  EngineConfig config = EngineConfig()
                            .train_iters(settings.train_iters)
                            .valid_step(settings.valid_step)
                            .log_step(settings.log_step)
                            .track_memory(settings.track_memory)
                            .strategy(settings.strategy)
                            .backend(settings.backend)
                            .timeout_s(settings.timeout_s);
  if (settings.early_stopping.enabled) {
    const auto& e = settings.early_stopping;
    config.early_stopping(EarlyStopping()
                              .metric(e.metric)
                              .mode(from_string<Mode>(e.mode, "engine.early_stopping.mode"))
                              .tolerance(e.tolerance)
                              .min_delta(e.min_delta)
                              .restore_best(e.restore_best));
  }
  return config;
}

}  // namespace run
}  // namespace mlo
