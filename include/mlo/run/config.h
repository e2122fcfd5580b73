#pragma once
/// \file
/// The configuration of an experiment launched by `mlo run`: plain structs with defaults, read
/// from and written to YAML by `mlo/run/yaml.h`. Names and values mirror the YAML keys
/// (docs/config-reference.md lists every key).

#include <mlo/base/fields.h>
#include <mlo/base/value_ptr.h>
#include <mlo/core/config.h>
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

/// `optimizer:` sgd | adam | adamw and their options.
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
};

/// `scheduler:` none | multistep | cosine, counted in optimizer steps.
struct SchedulerConfig {
  /// `none`, `multistep` or `cosine` (`scheduler_names()`).
  std::string name = "none";
  std::vector<int64_t> milestones;  ///< multistep
  double gamma = 0.1;               ///< multistep
  int64_t t_max = 0;                ///< cosine: period in optimizer steps (0: the run's length)
  double eta_min = 0.0;             ///< cosine: final learning rate, as a fraction of the base
};

/// One problem (level) of the experiment: the settings every experiment shares. An experiment
/// adds its own keys (e.g. `model:`) through `ExperimentSettings::visit_problem`.
struct ProblemSettings {
  /// `optimizer:` the problem's optimizer.
  OptimizerConfig optimizer;
  /// `scheduler:` its learning-rate schedule.
  SchedulerConfig scheduler;
  /// `ProblemConfig::unroll_steps` (>= 1).
  int64_t unroll_steps = 1;
  /// `ProblemConfig::warmup_steps` (>= 0).
  int64_t warmup_steps = 0;
  /// `ProblemConfig::roll_back`.
  bool roll_back = false;
  /// `ProblemConfig::gradient_clipping` (>= 0; 0: off).
  double gradient_clipping = 0.0;
  /// `ProblemConfig::gradient_accumulation` (>= 1).
  int64_t gradient_accumulation = 1;
  std::string precision = "fp32";  ///< fp32 | bf16 | fp16
  /// `checkpointing:` the memory area's own options struct (one struct from YAML to planner).
  CheckpointingOptions checkpointing;
  /// A registered hypergradient method's name (`mlo::method_names()`).
  std::string method = kDefaultMethod;
  /// Each registered method's options, by name: YAML `<name>: {...}` (the section's keys are
  /// the options type's own, `MethodOptions::visit`); `method` selects one. A method without an
  /// entry has its registered defaults (`method_options(*this, name)`).
  std::map<std::string, ValuePtr<MethodOptions>> methods;
  /// This problem's logging period in its local steps (0: the engine's `log_step`).
  int64_t log_step = 0;
  /// Under a distributed engine strategy: shard this level's training batches over the ranks
  /// (true), or let every rank read the same full batches (false, the per-level opt-out).
  bool data_parallel = true;
  /// Accept trainable parameters the level's loss does not reach as zero gradients
  /// (`ProblemConfig::allow_unused_parameters`; default: an error naming them).
  bool allow_unused_parameters = false;
  /// `ProblemConfig::offload`: none | cpu (zero3 on CUDA only).
  std::string offload = "none";
};

/// `early_stopping:` (optional).
struct EarlyStoppingConfig {
  /// Stop when `metric` stops improving (needs `engine.valid_step` > 0).
  bool enabled = false;
  /// A validation metric ("valid/<name>", see Experiment::evaluate). The defaults here are
  /// generic; an experiment may set its own (`ExperimentSettings::defaults`).
  std::string metric = "valid/loss";
  std::string mode = "min";  ///< min | max
  /// Validations without improvement before stopping (>= 1).
  int64_t tolerance = 5;
  /// Smallest change that counts as an improvement (>= 0).
  double min_delta = 0.0;
  /// Evaluate the test set with the parameters of the best validation
  /// (EarlyStopping::restore_best).
  bool restore_best = true;
};

/// `engine:` the schedule of the whole run.
struct EngineSettings {
  /// Global steps (`EngineConfig::train_iters`).
  int64_t train_iters = 3000;
  /// Validate every N global steps (0: never).
  int64_t valid_step = 500;
  /// Every N global steps each problem's latest metrics go to the metrics files, and a problem
  /// without a `log_step` of its own logs its line every N of its local steps. 0: neither.
  int64_t log_step = 100;
  int64_t save_step = 500;  ///< resumable state every N global steps (and at the end)
  /// Meter tensor memory exactly (`EngineConfig::track_memory`).
  bool track_memory = false;
  /// `early_stopping:` (off by default).
  EarlyStoppingConfig early_stopping;
  /// default (one process) | distributed | zero1 | zero2 (docs/distributed.md).
  dist::Strategy strategy = dist::Strategy::kDefault;
  /// gloo (CPU) | nccl (CUDA builds).
  dist::Backend backend = dist::Backend::kGloo;
  /// Longest wait of the rendezvous and of any collective, in seconds (> 0).
  double timeout_s = 300.0;
  /// cuDNN tries its algorithms for each new input shape and keeps the fastest (CUDA only;
  /// pays off when shapes repeat, as with fixed batch sizes).
  bool cudnn_benchmark = false;
  /// Deterministic cuDNN and cuBLAS kernels, and LibTorch's deterministic-algorithms mode
  /// (warning once for an op that has no deterministic kernel): run-to-run identical results
  /// on one GPU, at some speed. On the CPU mlo's runs are deterministic either way.
  bool deterministic = false;
  /// Every 4-D parameter (convolution weights) in channels-last layout (NHWC), so convolutions
  /// run in that layout: faster with fp16/bf16 on GPUs with tensor cores (cuDNN's NHWC kernels);
  /// off by default (not measured on a GPU by mlo yet). The same math either way.
  bool channels_last = false;
};

/// `logging:` what a run writes beside `metrics.csv` and `metrics.jsonl` (rank 0 only).
struct LoggingSettings {
  /// TensorBoard event files in `<out>/tb/`: every metrics record, the resolved config and the
  /// run's metadata (`tensorboard --logdir <out>`).
  bool tensorboard = true;
};

/// `dependencies:` the graph, by problem name (defaults follow the experiment).
struct DependencyConfig {
  /// Upper -> lowers: the upper's parameters enter the lowers' losses.
  std::map<std::string, std::vector<std::string>> u2l;
  /// Lower -> uppers: the lower's parameters enter the uppers' losses.
  std::map<std::string, std::vector<std::string>> l2u;
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
  /// The run's seed (>= 0): the experiment seeds its model initialization, data and shuffling
  /// from it.
  int64_t seed = 0;
  int64_t threads = 0;  ///< intra-op threads (0: LibTorch's default)
  /// auto | cpu | cuda | cuda:N (run/device.h): where every problem's module and batches live.
  std::string device = "auto";
  /// `engine:` the schedule of the whole run.
  EngineSettings engine;
  /// `logging:` what the run writes besides the metrics files.
  LoggingSettings logging;
  /// By name; which names an experiment accepts is its own rule (`ExperimentSettings::check`).
  std::map<std::string, ProblemSettings> problems;
  /// `dependencies:` the graph; with no edge, the experiment's default (`resolved_dependencies`).
  DependencyConfig dependencies;
  /// The experiment's own settings, of the type registered with it (null for a config built in
  /// code: `run::make_experiment` then uses the registered defaults).
  SettingsHolder settings;
  /// Where the YAML came from (for messages); not a YAML key.
  std::string source;
  /// Where each key was read: key path -> "file:line:col" (or "file (--set a.b=c)"); not a key.
  std::map<std::string, std::string> locations;

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

/// The options of method `name` in `settings`: its entry in `settings.methods`, else the
/// registered defaults; throws `mlo::Error` for an unregistered name.
std::shared_ptr<MethodOptions> method_options(const ProblemSettings& settings,
                                              const std::string& name);

/// The first key of method `name`'s section in `settings` ("iterations") set to a value other
/// than the method's default, or "" when the section keeps its defaults (or is absent).
std::string changed_method_key(const ProblemSettings& settings, const std::string& name);

/// The settings of a problem that act only when it is a lower problem (it has a parent):
/// `unroll_steps`, `warmup_steps`, `roll_back`, `method` and every method's options. Returns
/// the key (relative to the problem, e.g. "unroll_steps", "neumann.iterations") of the first
/// one set to a value other than its default, or "" when all keep their defaults.
std::string lower_only_setting(const ProblemSettings& settings);

/// The rules across keys: the experiment's problem names (`required_problems`,
/// `optional_problems`), the experiment's own rules (`ExperimentSettings::check`), then the
/// generic ones: no lower-only setting on a problem with nothing above it, no section of a method
/// that does not run unless `method` was set, dependencies naming existing problems, early
/// stopping on a "valid/" metric with validation on. Throws `mlo::Error` naming
/// the file, line and key (`RunConfig::fail`). The YAML reader and `make_experiment` call it.
void check_config(const RunConfig& config);

}  // namespace run
}  // namespace mlo
