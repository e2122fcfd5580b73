#pragma once
/// \file
/// `run::Experiment`: what `mlo run` launches from a YAML file. An experiment builds its
/// problems and the engine from a `RunConfig` (and trains nothing while it builds: training is
/// the run's), evaluates them on the validation split (during training) and on the test split
/// (once, at the end), and describes itself. Its own YAML keys are described and validated by
/// its settings type (`ExperimentSettings`, run/config.h). What the memory tools need of it
/// beyond that is a separate interface it may implement (run/memory_target.h).
///
/// Experiments register by name, like hypergradient methods:
///
/// ```
/// class MyExperiment : public mlo::run::Experiment {
///  public:
///   static constexpr const char* kName = "mine";   // `experiment: mine` in YAML
///   struct Settings : mlo::run::SettingsFor<Settings> { ... };   // optional: own YAML keys
///   explicit MyExperiment(const mlo::run::RunConfig& config);
///   ...
/// };
/// MLO_REGISTER_EXPERIMENT(MyExperiment);
/// ```
///
/// The ready-made ones: `reweighting` (problems/reweighting/experiment.h) and `hpo`
/// (problems/hpo/experiment.h).

#include <mlo/base/registry.h>
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

/// One experiment, built from a configuration. Subclasses build everything in their
/// constructor `(const RunConfig&)` and throw `mlo::Error` naming the key of a bad setting;
/// what trains, trains as part of the engine's run (a baseline too: as a callback of the
/// engine, core/callback.h), so that it shows progress, stops and resumes with the run.
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
  /// Whether the data is synthetic (every log and report then says so).
  virtual bool synthetic() const { return false; }
  /// The final report printed after training, from the test metrics and the final validation
  /// metrics ("valid/..."). The default lists `metric_names()` on both, one per line.
  virtual std::string report(const Metrics& test, const Metrics& valid) const;

  /// The engine's problem called `name`; throws `mlo::Error` listing the problems if there is
  /// none.
  std::shared_ptr<Problem> problem(const std::string& name);
};

/// Builds an experiment from a configuration (the registered class's constructor).
using ExperimentFactory = std::function<std::unique_ptr<Experiment>(const RunConfig&)>;
/// Builds an experiment's settings with their defaults.
using SettingsFactory = std::function<std::unique_ptr<ExperimentSettings>()>;

/// Registers an experiment under `name`, defined by the class `type`, at `where` ("file.cpp:12",
/// for messages). Returns true (for static registration). The registry's rule for names
/// (base/registry.h): the same class again is a no-op, another under a taken name makes that
/// name an error naming both places.
bool register_experiment(const std::string& name, std::type_index type, ExperimentFactory create,
                         SettingsFactory settings, const std::string& where);
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

/// `register_experiment` for a class `Class` with `kName` (see `MLO_REGISTER_EXPERIMENT`).
template <typename Class>
bool register_experiment_type(const char* file, int line) {
  using S = typename SettingsOf<Class>::type;
  static_assert(std::is_base_of<Experiment, Class>::value,
                "MLO_REGISTER_EXPERIMENT: the class must derive from mlo::run::Experiment");
  static_assert(std::is_base_of<ExperimentSettings, S>::value,
                "MLO_REGISTER_EXPERIMENT: Class::Settings must derive from "
                "mlo::run::SettingsFor<Settings>");
  return register_experiment(
      Class::kName, std::type_index(typeid(Class)),
      [](const RunConfig& config) -> std::unique_ptr<Experiment> {
        return std::make_unique<Class>(config);
      },
      []() -> std::unique_ptr<ExperimentSettings> { return std::make_unique<S>(); },
      registered_at(file, line));
}

}  // namespace detail
}  // namespace run
}  // namespace mlo

/// Registers `Class` (derived from `mlo::run::Experiment`, constructible from
/// `const mlo::run::RunConfig&`, with its name `kName` and an optional nested `Settings` type for
/// its own YAML keys) at load time, at namespace scope in a source file: `experiment: <kName>`
/// in YAML selects it.
#define MLO_REGISTER_EXPERIMENT(Class) \
  MLO_REGISTRATION(::mlo::run::detail::register_experiment_type<Class>(__FILE__, __LINE__))
