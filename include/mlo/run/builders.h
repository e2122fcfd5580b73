#pragma once
/// \file
/// Builders from the generic configuration structs to LibTorch and engine objects, for every
/// experiment (the ready-made ones and a user's own): optimizers, learning-rate schedules and a
/// problem's engine-side configuration.

#include <mlo/core/config.h>
#include <mlo/core/engine.h>
#include <mlo/core/problem.h>
#include <mlo/run/config.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace run {

// Every builder takes `key`, the YAML path of what it builds ("problems.classifier"), and
// throws `mlo::Error` naming `key.<field>` and the valid names for a name it does not know:
// no silent fallback to a default.

/// The optimizer `config` names, over `module`'s trainable parameters.
std::shared_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        torch::nn::Module& module,
                                                        const std::string& key);

/// The learning-rate multiplier of `config` as a function of optimizer steps; `total_steps` is
/// the run's number of optimizer steps (cosine's default period). Null for "none".
LrSchedule make_schedule(const SchedulerConfig& config, int64_t total_steps,
                         const std::string& key);

/// The optimizer steps each problem of `config` takes in the whole run (`engine.train_iters`
/// global steps), by name, counted by the engine's own schedule (`mlo::count_optimizer_steps`,
/// core/schedule.h). Cosine schedules run over these counts.
std::map<std::string, int64_t> optimizer_steps(const RunConfig& config);

/// Applies the generic keys of `problems.<name>` that act on the problem object itself: moves
/// the module to the run's `device` (run/device.h), then sets its optimizer over the module's
/// trainable parameters (set the module first) and its learning-rate schedule over the run's
/// optimizer steps (`optimizer_steps`). The rest of the generic keys reach it through its
/// `ProblemConfig` (`config.problems.at(name).config`), which the problem was constructed with.
void setup_problem(Problem& problem, const RunConfig& config);

/// Adds `problems` to `engine` (in this order), each with its module on the run's `device`,
/// and links them as the configuration's dependency
/// graph says (`resolved_dependencies`): the one place an experiment's graph is wired by name.
/// Throws `mlo::Error` naming the key for an edge whose problem is not among `problems`, and for
/// a problem under `problems:` that is not among them (its keys would be ignored).
void add_problems(Engine& engine, const RunConfig& config, const std::vector<ProblemPtr>& problems);

/// Throws `mlo::Error` "key: unknown <what> 'name'; valid names: a, b" unless `name` is one of
/// `valid`.
void check_name(const std::string& name, const std::vector<std::string>& valid,
                const std::string& what, const std::string& key);

}  // namespace run
}  // namespace mlo
