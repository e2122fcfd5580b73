#pragma once
/// \file
/// `mlo::Environment`: state that several problems share and that moves on with the engine's
/// global step, such as the task a meta-learning step samples, which the lower level adapts to
/// (its support set) and the upper level is judged on (its query set). The engine steps it once
/// at the start of every global step, before any problem steps, and saves and restores it with
/// its own state, so a resumed run continues with the same tasks. Problems read it through the
/// streams it hands out (`stream(role)`: each batch is `batch(role)` as it stands then), or
/// directly from their `training_step`.
///
/// ```
/// struct Tasks : mlo::Environment {
///   void step(int64_t global_step) override {      // a new task every 5 steps: 1, 6, 11, ...
///     if ((global_step - 1) % 5 == 0) task = sample_task();
///   }
///   mlo::Batch batch(const std::string& role) override {
///     return role == "support" ? task.support : task.query;
///   }
///   Task task;
/// };
/// auto tasks = std::make_shared<Tasks>();
/// inner->data(tasks->stream("support"));   // 5 steps on the task's support set
/// outer->data(tasks->stream("query"));     // then one step on its query set
/// engine.environment(tasks);
/// ```
///
/// Under data parallelism every rank steps its own copy the same way (seed it alike); what a
/// rank reads of its batches is the problem's business.

#include <mlo/core/batch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {

/// Shared state stepped once per global step (see the file comment). Own it through a
/// `std::shared_ptr` (`stream` needs one).
class Environment : public std::enable_shared_from_this<Environment> {
 public:
  virtual ~Environment() = default;
  /// Moves on to global step `global_step` (1 for the first). The engine calls it before any
  /// problem takes that step, also on resumed runs (the steps before the resume are not
  /// replayed: `load` restores where they left it).
  virtual void step(int64_t global_step) = 0;
  /// The batch that problems of `role` read now. The default throws `mlo::Error`: an
  /// environment that hands out streams overrides it, and throws naming the roles it knows for
  /// one it does not.
  virtual Batch batch(const std::string& role);
  /// A stream whose every batch is `batch(role)` at the time it is drawn (it keeps this
  /// environment alive). Throws `mlo::Error` when this environment is not owned by a
  /// `std::shared_ptr`.
  std::shared_ptr<BatchStream> stream(const std::string& role);
  /// Writes what `step` has made of the environment (its generator, the current task), as
  /// part of the engine's state. The default writes nothing.
  virtual void save(torch::serialize::OutputArchive& archive) const { (void)archive; }
  /// Restores what `save` wrote.
  virtual void load(torch::serialize::InputArchive& archive) { (void)archive; }
};

}  // namespace mlo
