#include "runner.h"

#include <mlo/base/error.h>
#include <mlo/core/engine.h>
#include <mlo/dist/process_group.h>
#include <mlo/io/run.h>
#include <mlo/run/device.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <algorithm>
#include <iostream>

namespace mlo {
namespace cli {
namespace {

// The experiment's headline metrics, each name prefixed: {"valid/acc", "valid/balanced_acc"}.
std::vector<std::string> headline_names(const run::Experiment& experiment,
                                        const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& name : experiment.metric_names()) names.push_back(prefix + name);
  return names;
}

// "; the sizes this configuration sets: problems.reweighter.model.hidden = ... (r.yaml:12:15)":
// the keys set in the configuration that size a model or a batch, for an out-of-memory error.
std::string sizes_set(const run::RunConfig& config) {
  std::string out;
  for (const auto& [key, where] : config.locations) {
    const std::string last = key.substr(key.rfind('.') + 1);
    const bool model = key.find("model.") != std::string::npos && last != "name";
    bool size = false;
    for (const char* word : {"hidden", "channels", "width", "batch_size"}) {
      size = size || last.find(word) != std::string::npos;
    }
    if (model || size) out += (out.empty() ? "" : ", ") + key + " (" + where + ")";
  }
  return out.empty() ? std::string() : "; the sizes this configuration sets: " + out;
}

}  // namespace

RunResult run_experiment(const run::RunConfig& config, const RunOptions& command,
                         const RaiseAt& raise_at) {
  // A GPU asked for and not there: an error, before anything is written.
  run::resolve_device(config);

  RunOptions options = command;
  if (options.dir().empty()) options.dir("runs/" + config.name);
  options.save_step(config.run.save_step()).tensorboard(config.run.tensorboard());
  // The folder's refusals before the experiment is built (data loaded, a baseline trained).
  Run::check(options);

  // The experiment is told its run folder (`config.run.dir()`), where it may leave files of its
  // own beside the run's (the architecture a search derived).
  run::RunConfig with_folder = config;
  with_folder.run = options;
  std::unique_ptr<run::Experiment> owned;
  try {
    owned = run::make_experiment(with_folder);
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemory("", "building experiment '" + config.experiment + "'" +
                              " ran out of memory (LibTorch: " + first_line(e) +
                              "): a model or data set the configuration asks for does not fit; "
                              "lower the sizes of its models or data" + sizes_set(config));
  }
  run::Experiment& experiment = *owned;
  Engine& engine = experiment.engine();
  // Validation (and early stopping) sees only the validation set held out of the training data;
  // the test set is evaluated once, after training. An experiment without a validation split
  // gets no hook: early stopping is then refused.
  const std::optional<std::string> no_validation = experiment.missing_validation();
  if (!no_validation) {
    std::vector<std::string> headline = headline_names(experiment, "valid/");
    if (config.engine.early_stopping().enabled()) {
      const std::string& watched = config.engine.early_stopping().metric();
      if (std::count(headline.begin(), headline.end(), watched) == 0) headline.push_back(watched);
    }
    engine.validation([&] { return experiment.evaluate(run::EvalSet::kValid); }, headline);
  }
  Run run(engine, options);
  const std::string resolved = run::to_yaml(config);
  // A saved record that reads back to the same configuration is the same one (an earlier
  // writer may have written other forms of the same numbers).
  run.config(resolved,
             [resolved, source = options.dir() + "/config.yaml"](const std::string& saved) {
               try {
                 return run::to_yaml(run::parse_run_config(saved, source)) == resolved;
               } catch (const std::exception&) {
                 return false;  // unreadable now: it differs
               }
             })
      .name(config.experiment)
      .seed(config.seed)
      .describe(experiment.describe())
      .synthetic(experiment.synthetic())
      .final_evaluation([&] { return experiment.evaluate(run::EvalSet::kTest); },
                        headline_names(experiment, ""));
  if (no_validation) run.without_validation(*no_validation);
  // (a crash injected once: a launcher's restart of the workers passes the step)
  std::shared_ptr<Callback> fault;
  if (raise_at.step > 0 && dist::Rendezvous::from_env().restart_count == 0) {
    const int rank = engine.config().strategy() == dist::Strategy::kDefault
                         ? 0
                         : dist::Rendezvous::from_env().rank;
    fault = std::make_shared<RaiseAtStep>(raise_at, rank);
    engine.add_callback(fault);
  }
  RunResult result;
  try {
    result = run.start();
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(e.problem(), e.what() + sizes_set(config));
  }
  if (fault) engine.remove_callback(*fault);
  if (!result.interrupted && !result.already_finished && !result.final.empty()) {
    std::cout << experiment.report(result.final, result.valid);
  }
  return result;
}

}  // namespace cli
}  // namespace mlo
