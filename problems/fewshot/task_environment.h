#pragma once
/// \file
/// `TaskEnvironment`: the few-shot task that both levels read, as an `mlo::Environment`. Every
/// `period` global steps (the lower level's unroll: its `unroll_steps` times its
/// `gradient_accumulation`) it draws a new task from its sampler, so the lower level adapts on
/// one task's support set through its whole unroll and the upper level's step that follows
/// reads the same task's query set. Its generator and the current task are saved with the
/// engine.

#include "problems/fewshot/tasks.h"

#include <mlo/core/environment.h>

#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <string>

namespace mlo {
namespace problems {
namespace fewshot {

class TaskEnvironment : public Environment {
 public:
  /// Draws from `sampler` every `period` (>= 1) global steps, with a generator seeded `seed`.
  TaskEnvironment(std::shared_ptr<const TaskSampler> sampler, int64_t period, uint64_t seed);
  /// A new task at global steps 1, 1 + period, 1 + 2 period, ...
  void step(int64_t global_step) override;
  /// "support" or "query" of the current task; another role is an error naming both.
  Batch batch(const std::string& role) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  /// The current task (empty before the first step).
  const Task& task() const { return task_; }
  /// Tasks drawn so far.
  int64_t tasks_drawn() const { return drawn_; }

 private:
  std::shared_ptr<const TaskSampler> sampler_;
  int64_t period_;
  at::Generator generator_;
  Task task_;
  int64_t drawn_ = 0;
};

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
