// The reweighting experiment's own YAML keys and rules (ReweightingExperiment::Settings).
#include "problems/reweighting/experiment.h"
#include "problems/reweighting/schemes/mwn.h"

#include <mlo/base/number_text.h>
#include <mlo/core/metrics.h>
#include <mlo/data/registry.h>
#include <mlo/nn/registry.h>
#include <mlo/run/builders.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {

// ---------------------------------------------------------------------------------------------
// Settings: the experiment's own keys and rules.

ModelConfig ReweightingExperiment::Settings::model(const std::string& problem) const {
  const auto found = models.find(problem);
  return found == models.end() ? ModelConfig(problem == "reweighter" ? "mwn" : "cnn")
                               : found->second;
}

void ReweightingExperiment::Settings::visit(Fields& v) {
  v.section("data", [&](Fields& s) {
    DataConfig& c = data;
    s("dataset", c.dataset, one_of(data::dataset_names()));
    s("root", c.root);
    s("imbalance", c.imbalance, [](const double& x) {
      return x >= 1 ? std::string() : "must be >= 1 (1 = balanced), got " + number_text(x);
    });
    s("meta_size", c.meta_size, at_least(1));
    s("valid_size", c.valid_size, at_least(0));
    s("shuffle_classes", c.shuffle_classes);
    s.section("label_noise", [&](Fields& n) {
      n("type", c.label_noise.type, one_of({"none", "uniform", "flip"}));
      n("ratio", c.label_noise.ratio, in_range(0.0, 1.0));
      n("seed", c.label_noise.seed, at_least(-1));
    });
    s("batch_size", c.batch_size, at_least(1));
    s("meta_batch_size", c.meta_batch_size, at_least(0));
    s("test_batch_size", c.test_batch_size, at_least(0));
    s("augment", c.augment);
    s("download", c.download);
    s("synthetic_fallback", c.synthetic_fallback);
    s("synthetic_size", c.synthetic_size, int_in_range(1, 60000));
    s("synthetic_test_size", c.synthetic_test_size, int_in_range(1, 60000));
  });
  v.section("reweighting", [&](Fields& s) { reweighting.visit(s); });
}

void ReweightingExperiment::Settings::visit_problem(const std::string& problem, Fields& v) {
  auto found = models.find(problem);
  if (found == models.end()) found = models.emplace(problem, model(problem)).first;
  // A scheme that builds the upper problem's module itself has no model there (`reweighting` is
  // read before the problems): a `model:` is read only for `check` to refuse it, and not written.
  if (problem != "classifier" && !reweighting.scheme().reads_model()) {
    v.alternative("model", [&](Fields& s) { found->second.visit(s); });
    return;
  }
  v.section("model", [&](Fields& s) { found->second.visit(s); });
}

void ReweightingExperiment::Settings::defaults(run::RunConfig& config) const {
  config.engine.early_stopping().metric("valid/balanced_acc").mode(Mode::kMax);
}

run::DependencyConfig ReweightingExperiment::Settings::default_dependencies(
    const run::RunConfig& config) const {
  if (config.problems.count("reweighter") == 0) return {};
  return run::DependencyConfig::bilevel("reweighter", "classifier");
}

std::vector<run::ExperimentSettings::GlobalBatch>
ReweightingExperiment::Settings::global_batches(const run::RunConfig& config) const {
  std::vector<GlobalBatch> out{{"data.batch_size", data.batch_size, "classifier"}};
  if (config.problems.count("reweighter") > 0 &&
      reweighting.scheme().weight_net() != WeightNet::kNone) {
    const bool own = data.meta_batch_size > 0;
    out.push_back({own ? "data.meta_batch_size" : "data.batch_size",
                   own ? data.meta_batch_size : data.batch_size, "reweighter"});
  }
  return out;
}

void ReweightingExperiment::Settings::check(const run::RunConfig& c) const {
  for (const auto& [name, p] : c.problems) {
    const std::string path = "problems." + name;
    const bool classifier = name == "classifier";
    const std::string model_name = model(name).name();
    if (!classifier && !reweighting.scheme().reads_model()) {
      const std::string key = path + ".model";
      if (c.locations.count(key)) {
        c.fail(key, reweighting.scheme().name() +
                        "'s upper problem has no model: its parameters are the scheme's own "
                        "(docs/reweighting.md); remove problems." + name + ".model");
      }
      continue;
    }
    if (classifier == (model_name == "mwn")) {
      c.fail(path + ".model.name",
             classifier ? "the classifier needs an image classifier (cnn, resnet32, resnet50 or "
                          "one a program registered), not mwn"
                        : "the reweighter's model must be mwn, got '" + model_name + "'");
    }
  }
  const bool has_reweighter = c.problems.count("reweighter") > 0;
  const Scheme& scheme = reweighting.scheme();
  // Another scheme's section set without `method`: the default scheme would run and the section
  // do nothing (read from YAML only: a configuration built in code says what it means).
  if (!c.locations.empty() && !c.locations.count("reweighting.method")) {
    for (const auto& key : c.alternative_keys) {
      if (key.rfind("reweighting.", 0) != 0) continue;
      const std::string other = key.substr(12, key.find('.', 12) - 12);
      c.fail(key, "sets an option of weighting scheme '" + other + "', but reweighting.method " +
                      "is not set, so '" + scheme.name() + "' (the default) runs and the '" +
                      other + "' section has no effect; add 'method: " + other +
                      "', or remove the section");
    }
  }
  if (scheme.weight_net() == WeightNet::kNone && has_reweighter) {
    c.fail("reweighting.method",
           scheme.name() + " has no weight net: remove problems.reweighter");
  }
  if (scheme.weight_net() == WeightNet::kRequired && !has_reweighter) {
    c.fail("reweighting.method", scheme.name() + " needs a 'reweighter' problem (the level " +
                                     "that learns its weights or its loss)");
  }
  if (!has_reweighter) {
    if (const auto* keys = dynamic_cast<const WeightNetKeys*>(&scheme)) {
      if (keys->logit_adjustment > 0) {
        c.fail("reweighting." + scheme.name() + ".logit_adjustment",
               "is " + number_text(keys->logit_adjustment) +
                   " without a reweighter problem, where there are no weights to put on "
                   "logit-adjusted losses; for logit adjustment alone use "
                   "'method: logit_adjusted'");
      }
    }
  }
  if (data.label_noise.type == "none" && data.label_noise.seed >= 0) {
    c.fail("data.label_noise.seed",
           "is " + std::to_string(data.label_noise.seed) +
               " while data.label_noise.type is none, so nothing is drawn; set type: uniform "
               "or flip, or remove the seed");
  }
  if (data.label_noise.type == "none" && data.label_noise.ratio > 0) {
    c.fail("data.label_noise.ratio",
           "is " + number_text(data.label_noise.ratio) +
               " while data.label_noise.type is none, so no label would change; set type: "
               "uniform or flip, or remove the ratio");
  }
  for (const auto& [key, size] :
       {std::pair<std::string, int64_t>{"data.meta_size", data.meta_size},
        std::pair<std::string, int64_t>{"data.valid_size", data.valid_size}}) {
    if (size % kClasses != 0) {
      c.fail(key, "must be a multiple of the number of classes (" + std::to_string(kClasses) +
                      "), got " + std::to_string(size));
    }
  }
  if (c.engine.early_stopping().enabled() && data.valid_size == 0) {
    c.fail("data.valid_size",
           "is 0 (no validation split) while engine.early_stopping is enabled: "
           "early stopping watches a validation metric (" +
               c.engine.early_stopping().metric() +
               "); set a validation set size > 0 or disable early stopping");
  }
  if (c.engine.valid_step() > 0 && data.valid_size == 0) {
    c.fail("data.valid_size", "is 0 (no validation set) while engine.valid_step is " +
                                  std::to_string(c.engine.valid_step()) +
                                  ": validation would have nothing to evaluate; set "
                                  "engine.valid_step: 0 or a validation set size > 0");
  }
  // Without a reweighter (and no graph of its own) the classifier is the only level: its
  // lower-level settings would do nothing. Said here because only this experiment knows why.
  if (!has_reweighter && c.dependencies.u2l.empty() && c.dependencies.l2u.empty()) {
    const auto found = c.problems.find("classifier");
    const std::string key = run::lower_only_setting(found->second.config);
    if (!key.empty()) {
      c.fail("problems.classifier." + key,
             "acts only on a lower problem (one with a problem above it), and 'classifier' has "
             "no problem above it in the dependency graph (no reweighter is configured: the "
             "baseline), so it would have no effect; remove it");
    }
  }
  // Validation metrics are "valid/<name>" (evaluate); a class's accuracy is named by the class's
  // metric segment ("valid/acc/ankle_boot"), of the dataset or of its synthetic fallback.
  std::vector<std::string> metrics{"valid/acc", "valid/balanced_acc", "valid/rare3_acc",
                                   "valid/loss"};
  std::string classes;
  std::vector<std::string> datasets{data.dataset};
  if (data.synthetic_fallback && data.dataset != "synthetic") datasets.push_back("synthetic");
  for (const auto& dataset : datasets) {
    for (const auto& name : dataset_class_names(dataset)) {
      metrics.push_back("valid/acc/" + metric_segment(name));
      classes += (classes.empty() ? "" : ", ") + metric_segment(name);
    }
  }
  const std::string& metric = c.engine.early_stopping().metric();
  if (std::count(metrics.begin(), metrics.end(), metric) == 0) {
    c.fail("engine.early_stopping.metric",
           "must be a validation metric: valid/acc, valid/balanced_acc, valid/rare3_acc, "
           "valid/loss or valid/acc/<class> (<class>: " +
               classes + "); got '" + metric + "'");
  }
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
