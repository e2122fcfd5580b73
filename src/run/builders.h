#pragma once
// Builders from configuration structs to LibTorch objects (internal to src/run).

#include <mlo/core/config.h>
#include <mlo/core/problem.h>
#include <mlo/run/config.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>

namespace mlo {
namespace run {
namespace detail {

/// The optimizer `config` names, over `module`'s trainable parameters.
std::shared_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        torch::nn::Module& module);

/// The learning-rate multiplier of `config` as a function of optimizer steps; `total_steps` is
/// the run's number of optimizer steps (cosine's default period). Null for "none".
LrSchedule make_schedule(const SchedulerConfig& config, int64_t total_steps);

/// The engine-side configuration of a problem.
ProblemConfig make_problem_config(const ProblemSettings& settings);

/// The model `config` names; `channels` and `image_size` describe the input images.
std::shared_ptr<torch::nn::Module> make_model(const ModelConfig& config, int64_t channels,
                                              int64_t image_size, int64_t num_classes);

}  // namespace detail
}  // namespace run
}  // namespace mlo
