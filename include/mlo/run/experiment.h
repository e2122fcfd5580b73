#pragma once
/// \file
/// `run::Experiment`: what `mlo run` and `mlo plan` launch from a YAML file. An experiment
/// builds its problems and the engine from a `RunConfig`, evaluates them on the validation split
/// (during training) and on the test split (once, at the end), and describes itself. Its own YAML
/// keys are described and validated by its settings type (`ExperimentSettings`, run/config.h).
///
/// Experiments register by name, like hypergradient methods:
///
/// ```
/// class MyExperiment : public mlo::run::Experiment {
///  public:
///   struct Settings : mlo::run::SettingsFor<Settings> { ... };   // optional: own YAML keys
///   explicit MyExperiment(const mlo::run::RunConfig& config);
///   ...
/// };
/// MLO_REGISTER_EXPERIMENT("mine", MyExperiment);   // `experiment: mine` in YAML
/// ```
///
/// The ready-made ones: `reweighting` (problems/reweighting/experiment.h) and `hpo`
/// (problems/hpo/experiment.h).

#include <mlo/core/batch.h>
#include <mlo/core/engine.h>
#include <mlo/core/problem.h>
#include <mlo/run/config.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <typeindex>
#include <vector>

namespace mlo {
namespace run {

/// Which held-out data `Experiment::evaluate` uses.
enum class EvalSet {
  kValid,  ///< the validation split: validation during training, early stopping
  kTest,   ///< the test split: the final report only
};

/// The keys of an experiment's own that a memory tool (`mlo ablate`) changes besides the
/// generic per-problem ones (precision, gradient_accumulation, checkpointing, a method's
/// options): they differ from experiment to experiment, so the experiment names them.
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

/// One experiment, built from a configuration. Subclasses build everything in their
/// constructor `(const RunConfig&)` and throw `mlo::Error` naming the key of a bad setting.
/// Under `mlo run`, `config.run.dir()` is the run folder, where an experiment may write files
/// of its own (a search's derived architecture); it is empty for a configuration built in code.
class Experiment {
 public:
  virtual ~Experiment() = default;

  /// The engine, with every problem added and linked.
  virtual Engine& engine() = 0;
  /// Metrics on `set`. On the validation split every name is prefixed "valid/"
  /// ("valid/loss"), so a number says which split it comes from; test metrics have plain names.
  /// Names satisfy `is_metric_name` (a class name enters through `metric_segment`). Not called
  /// with `kValid` when `missing_validation()` says there is no validation split.
  virtual Metrics evaluate(EvalSet set) = 0;
  /// The headline metrics of `evaluate`, without the "valid/" prefix, most important first
  /// (reweighting: "acc", "balanced_acc"): what the runner's log lines show after each
  /// validation and at the end, at 4 significant digits (the metrics files keep them all).
  virtual std::vector<std::string> metric_names() const = 0;
  /// Why the experiment has no validation split ("data.valid_size is 0"), or nullopt when it
  /// has one (the default). Without one nothing validates (the run refuses early stopping),
  /// `results.json` has an empty "valid", and the log ends with "final validation: none (...)".
  virtual std::optional<std::string> missing_validation() const { return std::nullopt; }
  /// A few lines describing data, problems and models, for logs.
  virtual std::string describe() const = 0;
  /// The problem `mlo plan` profiles when no `--problem` is given.
  virtual std::string default_problem() const = 0;

  /// The problem called `name`; throws `mlo::Error` listing the problems if there is none.
  virtual std::shared_ptr<Problem> problem(const std::string& name);
  /// One training batch of problem `name`, as its data would give it (for `mlo plan`). The
  /// default throws: an experiment that supports `mlo plan` overrides it.
  virtual Batch sample_batch(const std::string& name);
  /// Whether the data is synthetic (every report then says so).
  virtual bool synthetic() const { return false; }
  /// The name of problem `name`'s model as configured ("resnet32"), for reports; "" when the
  /// experiment does not name its models.
  virtual std::string model_name(const std::string& name) const {
    (void)name;
    return "";
  }
  /// Its own keys that a memory tool changes (`MemoryKeys`); the default names none.
  virtual MemoryKeys memory_keys() const { return {}; }
  /// The final report printed after training, from the test metrics and the final validation
  /// metrics ("valid/..."). The default lists `metric_names()` on both, one per line.
  virtual std::string report(const Metrics& test, const Metrics& valid) const;
};

/// Builds an experiment from a configuration (the registered class's constructor).
using ExperimentFactory = std::function<std::unique_ptr<Experiment>(const RunConfig&)>;
/// Builds an experiment's settings with their defaults.
using SettingsFactory = std::function<std::unique_ptr<ExperimentSettings>()>;

/// Registers an experiment under `name`, defined by the class `type`; `file` and `line` say
/// where (for messages). Returns true (for static registration). The registry's rule for names
/// (base/registry.h): the same class again is a no-op, another under a taken name makes that
/// name an error naming both places.
bool register_experiment(const std::string& name, std::type_index type, ExperimentFactory create,
                         SettingsFactory settings, const char* file, int line);
/// The registered names, sorted.
std::vector<std::string> experiment_names();
/// Whether `name` is registered.
bool is_experiment(const std::string& name);
/// The default settings of experiment `name`. Throws `mlo::Error` listing the registered
/// experiments if `name` is not one.
std::unique_ptr<ExperimentSettings> make_settings(const std::string& name);
/// Builds the experiment `config.experiment` names (with its default settings when
/// `config.settings` is empty). Throws `mlo::Error` listing the registered experiments if none
/// has that name.
std::unique_ptr<Experiment> make_experiment(const RunConfig& config);

namespace detail {

template <typename T, typename = void>
struct SettingsOf {
  using type = NoSettings;
};
template <typename T>
struct SettingsOf<T, std::void_t<typename T::Settings>> {
  using type = typename T::Settings;
};

template <typename Class>
bool register_experiment_class(const char* name, const char* file, int line) {
  using S = typename SettingsOf<Class>::type;
  static_assert(std::is_base_of<Experiment, Class>::value,
                "MLO_REGISTER_EXPERIMENT: the class must derive from mlo::run::Experiment");
  static_assert(std::is_base_of<ExperimentSettings, S>::value,
                "MLO_REGISTER_EXPERIMENT: Class::Settings must derive from "
                "mlo::run::SettingsFor<Settings>");
  return register_experiment(
      name, std::type_index(typeid(Class)),
      [](const RunConfig& config) -> std::unique_ptr<Experiment> {
        return std::make_unique<Class>(config);
      },
      []() -> std::unique_ptr<ExperimentSettings> { return std::make_unique<S>(); }, file, line);
}

}  // namespace detail
}  // namespace run
}  // namespace mlo

/// Pastes `a` and `b` into one token (the helper of `MLO_EXPERIMENT_CONCAT`).
#define MLO_EXPERIMENT_CONCAT_(a, b) a##b
/// Pastes `a` and `b` after expanding them (`__COUNTER__` becomes its number): how
/// `MLO_REGISTER_EXPERIMENT` names a variable of its own at each use.
#define MLO_EXPERIMENT_CONCAT(a, b) MLO_EXPERIMENT_CONCAT_(a, b)

/// Registers `Class` (derived from `mlo::run::Experiment`, constructible from
/// `const mlo::run::RunConfig&`, with an optional nested `Settings` type for its own YAML keys)
/// as the experiment `NAME` (`experiment: NAME` in YAML), at load time. Use it at namespace
/// scope in a source file.
#define MLO_REGISTER_EXPERIMENT(NAME, Class)                                         \
  static const bool MLO_EXPERIMENT_CONCAT(mlo_registered_experiment_, __COUNTER__) = \
      ::mlo::run::detail::register_experiment_class<Class>(NAME, __FILE__, __LINE__)
