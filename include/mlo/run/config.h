#pragma once
/// \file
/// The configuration of an experiment launched by `mlo run`, read from and written to YAML by
/// `mlo/run/yaml.h`: the core's own configs (`EngineConfig`, `ProblemConfig`, `RunOptions`,
/// each describing its keys), plus what only a YAML experiment needs (its name, seed and device,
/// each problem's optimizer and schedule, the graph by name, the experiment's own settings).
/// docs/config-reference.md lists every key.

#include <mlo/base/fields.h>
#include <mlo/base/value_ptr.h>
#include <mlo/core/config.h>
#include <mlo/io/run.h>
#include <mlo/memory/options.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace run {

/// The valid values of the string-named generic settings below, one list each: the YAML
/// validation (run/yaml.h) and the builders (run/builders.h) both read them, so a name is either
/// known or an error listing these. This one: `OptimizerConfig::name`.
inline const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names{"sgd", "adam", "adamw"};
  return names;
}
/// The valid values of `SchedulerConfig::name` (see `optimizer_names`).
inline const std::vector<std::string>& scheduler_names() {
  static const std::vector<std::string> names{"none", "multistep", "cosine"};
  return names;
}

/// `optimizer:` sgd | adam | adamw and their options: what a YAML experiment builds a
/// problem's optimizer from (a program written in C++ builds its own).
struct OptimizerConfig {
  /// `sgd`, `adam` or `adamw` (`optimizer_names()`).
  std::string name = "sgd";
  /// Learning rate (> 0).
  double lr = 0.1;
  double momentum = 0.0;  ///< sgd
  /// Weight decay (>= 0), the optimizer's own (AdamW's decoupled).
  double weight_decay = 0.0;
  bool nesterov = false;  ///< sgd
  double beta1 = 0.9;     ///< adam, adamw
  double beta2 = 0.999;   ///< adam, adamw
  double eps = 1e-8;      ///< adam, adamw
  /// Describes the keys, with their checks.
  void visit(Fields& fields);
};

/// `scheduler:` none | multistep | cosine, counted in optimizer steps.
struct SchedulerConfig {
  /// `none`, `multistep` or `cosine` (`scheduler_names()`).
  std::string name = "none";
  std::vector<int64_t> milestones;  ///< multistep
  double gamma = 0.1;               ///< multistep
  int64_t t_max = 0;                ///< cosine: period in optimizer steps (0: the run's length)
  double eta_min = 0.0;             ///< cosine: final learning rate, as a fraction of the base
  /// Describes the keys, with their checks.
  void visit(Fields& fields);
};

/// The device switches under `engine:` (the device itself is the top-level `device` key,
/// run/device.h applies both).
struct DeviceOptions {
  /// cuDNN tries its algorithms for each new input shape and keeps the fastest (CUDA only;
  /// pays off when shapes repeat, as with fixed batch sizes).
  bool cudnn_benchmark = false;
  /// Deterministic cuDNN and cuBLAS kernels, and LibTorch's deterministic-algorithms mode
  /// (warning once for an op that has no deterministic kernel): run-to-run identical results
  /// on one GPU, at some speed. On the CPU mlo's runs are deterministic either way.
  bool deterministic = false;
  /// Every 4-D parameter (convolution weights) in channels-last layout (NHWC), so convolutions
  /// run in that layout: faster with fp16/bf16 on GPUs with tensor cores (cuDNN's NHWC kernels).
  /// The same math either way.
  bool channels_last = false;
  /// Describes the keys.
  void visit(Fields& fields);
};

/// One entry of `problems:`: the problem's own configuration (the core's `ProblemConfig`, whose
/// keys it describes itself) and the optimizer and learning-rate schedule a YAML experiment
/// builds for it. An experiment adds its own keys (e.g. `model:`) through
/// `ExperimentSettings::visit_problem`.
struct ProblemSection {
  /// `unroll_steps`, `method`, `precision`, ...: what the problem is constructed with.
  ProblemConfig config;
  /// `optimizer:` the problem's optimizer.
  OptimizerConfig optimizer;
  /// `scheduler:` its learning-rate schedule.
  SchedulerConfig scheduler;
  /// Describes the keys (the optimizer's, the schedule's, then the config's).
  void visit(Fields& fields);
};

/// `dependencies:` the graph, by problem name (defaults follow the experiment).
struct DependencyConfig {
  /// Upper -> lowers: the upper's parameters enter the lowers' losses.
  std::map<std::string, std::vector<std::string>> u2l;
  /// Lower -> uppers: the lower's parameters enter the uppers' losses.
  std::map<std::string, std::vector<std::string>> l2u;
  /// The bilevel pair: `upper` above `lower`, both edges (`u2l` and `l2u`).
  static DependencyConfig bilevel(const std::string& upper, const std::string& lower) {
    DependencyConfig graph;
    graph.u2l[upper] = {lower};
    graph.l2u[lower] = {upper};
    return graph;
  }
};

struct RunConfig;

/// What an experiment adds to the YAML: its own top-level sections (reweighting's `data:`), its
/// own keys inside each problem (`model:`), its defaults for generic keys and its rules across
/// keys. Registered with the experiment (`MLO_REGISTER_EXPERIMENT`, run/experiment.h), so the
/// YAML reader validates a config completely before anything is built. Derive from
/// `SettingsFor<YourSettings>` (it provides `clone`).
class ExperimentSettings {
 public:
  virtual ~ExperimentSettings() = default;
  /// A copy (configurations are values).
  virtual std::unique_ptr<ExperimentSettings> clone() const = 0;
  /// Describes the experiment's own top-level sections (`fields.section("data", ...)`).
  virtual void visit(Fields& fields) { (void)fields; }
  /// Describes the experiment's own keys inside `problems.<problem>`.
  virtual void visit_problem(const std::string& problem, Fields& fields) {
    (void)problem;
    (void)fields;
  }
  /// Sets the experiment's defaults of generic keys (e.g. the early-stopping metric) before the
  /// YAML is read; the YAML still overrides them.
  virtual void defaults(RunConfig& config) const { (void)config; }
  /// The problems (levels) the experiment builds, by name: each required one must be under
  /// `problems:`, and no names but these and the optional ones may be (checked before `check`,
  /// with the file position). Both empty (the default): any names.
  virtual std::vector<std::string> required_problems() const { return {}; }
  /// The problems the experiment may build but does not need (see `required_problems`).
  virtual std::vector<std::string> optional_problems() const { return {}; }
  /// The dependency graph when the YAML names none (e.g. reweighter above classifier).
  virtual DependencyConfig default_dependencies(const RunConfig& config) const;
  /// Rules across keys (which problems exist, model names, sizes), checked once everything is
  /// read, before the generic rules; fail with `config.fail(path, what)` so the message names
  /// the file, line and key.
  virtual void check(const RunConfig& config) const { (void)config; }

  /// A batch the experiment splits over the ranks of a launch: the key that sets it, its
  /// global size, the problem that reads it, and how many such batches the key's value holds
  /// (so that a value that is a multiple of `per_key` x the world size splits).
  struct GlobalBatch {
    std::string key;      ///< The YAML key that sets the batch, e.g. `data.meta_batch_size`.
    int64_t size = 0;     ///< The batch's global size (all ranks together).
    std::string problem;  ///< The problem whose steps read the batch.
    int64_t per_key = 1;  ///< How many such batches one value of `key` holds.
  };
  /// The global batches of `config`'s run, each of which must split evenly over the ranks
  /// where its problem is data parallel (`run::check_world_size`, at the start of each rank and
  /// in `mlo launch` before any rank starts). None by default.
  virtual std::vector<GlobalBatch> global_batches(const RunConfig& config) const {
    (void)config;
    return {};
  }
};

/// `clone` for a settings type `Derived` (copyable).
template <typename Derived>
class SettingsFor : public ExperimentSettings {
 public:
  /// A copy of this object as a `Derived`.
  std::unique_ptr<ExperimentSettings> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

/// The settings of an experiment with no keys of its own.
class NoSettings : public SettingsFor<NoSettings> {};

/// Holds an experiment's settings with value semantics (copying a RunConfig copies them).
class SettingsHolder {
 public:
  /// Empty: holds no settings.
  SettingsHolder() = default;
  /// Takes ownership of `settings` (which may be null).
  explicit SettingsHolder(std::unique_ptr<ExperimentSettings> settings)
      : settings_(std::move(settings)) {}
  /// A deep copy: `other`'s settings cloned (empty if `other` is).
  SettingsHolder(const SettingsHolder& other)
      : settings_(other.settings_ ? other.settings_->clone() : nullptr) {}
  /// Replaces the settings with a clone of `other`'s (empty if `other` is).
  SettingsHolder& operator=(const SettingsHolder& other) {
    if (this != &other) settings_ = other.settings_ ? other.settings_->clone() : nullptr;
    return *this;
  }
  /// Takes the settings of the moved-from holder, without cloning.
  SettingsHolder(SettingsHolder&&) = default;
  /// Takes the settings of the moved-from holder, without cloning.
  SettingsHolder& operator=(SettingsHolder&&) = default;

  /// Whether settings are held.
  explicit operator bool() const { return settings_ != nullptr; }
  /// The held settings, or null when empty.
  ExperimentSettings* get() const { return settings_.get(); }
  /// The held settings, or null when empty.
  ExperimentSettings* operator->() const { return settings_.get(); }

 private:
  std::unique_ptr<ExperimentSettings> settings_;
};

/// A whole experiment: the generic keys, plus the experiment's own settings.
struct RunConfig {
  /// A registered experiment (`run::experiment_names()`); required in YAML.
  std::string experiment;
  std::string name = "experiment";  ///< used in logs and as the default output folder
  /// The run's seed, in [0, kMaxSeed]: the experiment seeds its model initialization, data and
  /// shuffling from it.
  int64_t seed = 0;
  int64_t threads = 0;  ///< intra-op threads (0: LibTorch's default)
  /// auto | cpu | cuda | cuda:N (run/device.h): where every problem's module and batches live.
  std::string device = "auto";
  /// `engine:` the schedule of the whole run (the core's `EngineConfig`, whose keys it
  /// describes itself).
  EngineConfig engine;
  /// `engine.save_step`, `engine.tensorboard`: how the run writes its folder (`mlo::Run`).
  RunOptions run;
  /// `engine.cudnn_benchmark`, `engine.deterministic`, `engine.channels_last` (run/device.h).
  DeviceOptions device_options;
  /// By name; which names an experiment accepts is its own rule (`ExperimentSettings::check`).
  std::map<std::string, ProblemSection> problems;
  /// `dependencies:` the graph; with no edge, the experiment's default (`resolved_dependencies`).
  DependencyConfig dependencies;
  /// The experiment's own settings, of the type registered with it (null for a config built in
  /// code: `run::make_experiment` then uses the registered defaults).
  SettingsHolder settings;
  /// Where the YAML came from (for messages); not a YAML key.
  std::string source;
  /// Where each key was read: key path -> "file:line:col" (or "file (--set a.b=c)"); not a key.
  std::map<std::string, std::string> locations;
  /// The keys the YAML sets in sections the configuration does not use (another hypergradient
  /// method's than the one selected), by path, whatever their values; not a key.
  /// `check_config` refuses them unless the method was chosen explicitly.
  std::vector<std::string> alternative_keys;

  /// The experiment's settings as `S`; throws `mlo::Error` if they are absent or of another type.
  template <typename S>
  const S& settings_as() const {
    const S* typed = dynamic_cast<const S*>(settings.get());
    if (!typed) settings_error();
    return *typed;
  }
  /// The experiment's settings as `S`, writable; throws `mlo::Error` if they are absent or of
  /// another type.
  template <typename S>
  S& settings_as() {
    S* typed = dynamic_cast<S*>(settings.get());
    if (!typed) settings_error();
    return *typed;
  }
  /// Where key `path` ("problems.inner.method") was set: its own location, else the nearest
  /// enclosing key's, else `source`.
  std::string where(const std::string& path) const;
  /// Throws `mlo::Error` "<where(path)>: <path>: <what>", the form of every config error.
  [[noreturn]] void fail(const std::string& path, const std::string& what) const;

 private:
  [[noreturn]] void settings_error() const;
};

/// The dependency graph `config` runs with: `config.dependencies` when it names any edge, else
/// the experiment's default (`ExperimentSettings::default_dependencies`).
DependencyConfig resolved_dependencies(const RunConfig& config);

/// The problems above `name` in `graph` (its `l2u` targets): the problems its unroll feeds.
std::vector<std::string> parents_of(const DependencyConfig& graph, const std::string& name);

/// The largest seed a run takes: LibTorch's generators keep 32 bits of a seed, and experiments
/// derive a few more seeds from it (seed + 1, seed + 1000), which must not wrap either.
inline constexpr int64_t kMaxSeed = 2147483647;

/// Why `seed` cannot seed a run ("must be in [0, 2147483647] ..."), or "".
std::string seed_error(const int64_t& seed);

/// Why `name` cannot name a run (the top-level `name` key: the default output folder
/// `runs/NAME`), or "": it must be a plain, non-empty name without '/'.
std::string run_name_error(const std::string& name);

/// The settings of a problem that act only when it is a lower problem (it has a parent):
/// `unroll_steps`, `warmup_steps`, `roll_back`, `method` and the method's options. Returns the
/// key (relative to the problem, e.g. "unroll_steps", "neumann.iterations") of the first one set
/// to a value other than its default, or "" when all keep their defaults.
std::string lower_only_setting(const ProblemConfig& config);

/// The rules across keys: the experiment's problem names (`required_problems`,
/// `optional_problems`), the experiment's own rules (`ExperimentSettings::check`), then the
/// generic ones: no lower-only setting on a problem with nothing above it, no section of a method
/// that does not run unless `method` was set, dependencies naming existing problems, early
/// stopping on a "valid/" metric with validation on. Throws `mlo::Error` naming
/// the file, line and key (`RunConfig::fail`). The YAML reader and `make_experiment` call it.
void check_config(const RunConfig& config);

}  // namespace run
}  // namespace mlo
