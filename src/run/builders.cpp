#include <mlo/run/builders.h>

#include <mlo/base/error.h>
#include <mlo/core/schedule.h>
#include <mlo/run/device.h>

#include <torch/optim.h>

#include <algorithm>
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

std::map<std::string, int64_t> optimizer_steps(const RunConfig& config) {
  // NOTE: the engine's own schedule (core/schedule.h), run on counts: exact also for a problem
  // above several children with different periods.
  const DependencyConfig graph = resolved_dependencies(config);
  std::vector<std::string> names;
  std::map<std::string, size_t> index;
  for (const auto& [name, section] : config.problems) {
    index[name] = names.size();
    names.push_back(name);
  }
  std::vector<Schedule::Level> levels;
  std::vector<std::vector<size_t>> parents;
  for (const auto& [name, section] : config.problems) {
    levels.push_back(Schedule::Level::of(section.config));
    parents.emplace_back();
    for (const auto& parent : parents_of(graph, name)) {
      const auto found = index.find(parent);
      if (found != index.end()) parents.back().push_back(found->second);  // (else check_config)
    }
  }
  const auto counts = count_optimizer_steps(levels, parents, config.engine.train_iters());
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < names.size(); ++i) out[names[i]] = counts[i];
  return out;
}

void setup_problem(Problem& problem, const RunConfig& config) {
  const std::string& name = problem.name();
  const auto found = config.problems.find(name);
  MLO_CHECK(found != config.problems.end(), "setup_problem: no problems.", name,
            " in the configuration");
  const ProblemSection& settings = found->second;
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

}  // namespace run
}  // namespace mlo
