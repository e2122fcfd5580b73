#pragma once
// Builders from configuration structs to LibTorch objects (internal to src/run).

#include <mlo/core/config.h>
#include <mlo/core/problem.h>
#include <mlo/run/config.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace run {
namespace detail {

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

/// The engine-side configuration of a problem.
ProblemConfig make_problem_config(const ProblemSettings& settings, const std::string& key);

/// The model `config` names; `channels` and `image_size` describe the input images.
std::shared_ptr<torch::nn::Module> make_model(const ModelConfig& config, int64_t channels,
                                              int64_t image_size, int64_t num_classes,
                                              const std::string& key);

/// Throws `mlo::Error` "key: unknown <what> 'name'; valid names: a, b" unless `name` is one of
/// `valid`.
void check_name(const std::string& name, const std::vector<std::string>& valid,
                const std::string& what, const std::string& key);

}  // namespace detail
}  // namespace run
}  // namespace mlo
