#pragma once
/// \file
/// `run::MemoryTarget`: what the memory tools (`mlo plan`, `mlo ablate`) ask of an experiment
/// beyond building, evaluating and describing it: which problem to profile, a batch of its data,
/// its model's name and the experiment's own keys that change memory. An experiment that
/// supports the tools implements it beside `run::Experiment` (the reweighting and HPO
/// experiments do); the tools ask for it (`memory_target`) and refuse, naming the experiment,
/// one that does not.
///
/// ```
/// class MyExperiment : public mlo::run::Experiment, public mlo::run::MemoryTarget {
///   ...
///   std::string main_problem() const override { return "classifier"; }
///   mlo::Batch sample_batch(const std::string& problem) override;
/// };
/// ```

#include <mlo/core/batch.h>

#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace run {

class Experiment;

/// The keys of an experiment's own that a memory tool changes besides the generic per-problem
/// ones (precision, gradient_accumulation, checkpointing, a method's options): they differ
/// from experiment to experiment, so the experiment names them.
struct MemoryKeys {
  /// The main problem's batch-size key ("data.batch_size"); "" when it has none (full batches).
  std::string batch_key;
  /// The other problems' batch-size keys, by problem name ({"reweighter",
  /// "data.meta_batch_size"}).
  std::vector<std::pair<std::string, std::string>> other_batch_keys;
  /// Overrides, relative to `problems.<main problem>.`, that make the model's activations
  /// memory-efficient ({"model.efficient_activation=true"}); empty when the model has none.
  std::vector<std::string> efficient_activation;
};

/// What the memory tools ask of an experiment (see the file comment).
class MemoryTarget {
 public:
  virtual ~MemoryTarget() = default;
  /// The problem the tools profile when none is named (their `--problem`).
  virtual std::string main_problem() const = 0;
  /// One training batch of problem `name`, as its data would give it; throws `mlo::Error`
  /// naming the problem when it has none.
  virtual Batch sample_batch(const std::string& name) = 0;
  /// The name of problem `name`'s model as configured ("resnet32"), for reports; "" when the
  /// experiment does not name its models.
  virtual std::string model_name(const std::string& name) const {
    (void)name;
    return "";
  }
  /// Its own keys that a memory tool changes; the default names none.
  virtual MemoryKeys memory_keys() const { return {}; }
};

/// `experiment` (registered as `name`) as a memory target; throws `mlo::Error` naming `tool`
/// and the experiment when it implements none.
MemoryTarget& memory_target(Experiment& experiment, const std::string& name,
                            const std::string& tool);

}  // namespace run
}  // namespace mlo
