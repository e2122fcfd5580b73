// The reweighting experiment's own YAML keys and rules (ReweightingExperiment::Settings).
#include "problems/reweighting/experiment.h"

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

const std::vector<std::string>& method_names() {
  static const std::vector<std::string> names{"mwn", "class_mwn", "l2rw", "class_balanced",
                                              "logit_adjusted"};
  return names;
}

// ---------------------------------------------------------------------------------------------
// Settings: the experiment's own keys and rules.

ModelConfig ReweightingExperiment::Settings::model(const std::string& problem) const {
  const auto found = models.find(problem);
  return found == models.end() ? ModelConfig() : found->second;
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
    s("batch_size", c.batch_size, at_least(1));
    s("meta_batch_size", c.meta_batch_size, at_least(0));
    s("test_batch_size", c.test_batch_size, at_least(0));
    s("augment", c.augment);
    s("download", c.download);
    s("synthetic_fallback", c.synthetic_fallback);
    s("synthetic_size", c.synthetic_size, at_least(1));
    s("synthetic_test_size", c.synthetic_test_size, at_least(1));
  });
  v.section("reweighting", [&](Fields& s) {
    s("method", reweighting.method, one_of(method_names()));
    s("normalize_weights", reweighting.normalize_weights);
    s("freeze_weight_inputs", reweighting.freeze_weight_inputs);
    s("l2rw_alpha", reweighting.l2rw_alpha,
      [](const double& x) { return x > 0 ? std::string() : "must be > 0, got " + number_text(x); });
    s("max_relative_weight", reweighting.max_relative_weight, [](const double& x) {
      return x == 0 || x >= 1 ? std::string()
                              : "must be 0 (no bound) or >= 1, got " + number_text(x);
    });
    s("weight_floor", reweighting.weight_floor, [](const double& x) {
      return x >= 0 && x < 1 ? std::string()
                             : "must be in [0, 1) (0 = none), got " + number_text(x);
    });
    s("weight_floor_after", reweighting.weight_floor_after, [](const int64_t& x) {
      return x >= 0 ? std::string()
                    : "must be >= 0 (steps; 0 = from the first), got " + std::to_string(x);
    });
    s("class_balanced_beta", reweighting.class_balanced_beta, [](const double& x) {
      return x >= 0 && x <= 1
                 ? std::string()
                 : "must be in [0, 1] (1 = inverse class frequency), got " + number_text(x);
    });
    s("logit_adjustment_tau", reweighting.logit_adjustment_tau, [](const double& x) {
      return x >= 0 && std::isfinite(x)
                 ? std::string()
                 : "must be finite and >= 0 (0 = plain cross-entropy), got " + number_text(x);
    });
  });
}

void ReweightingExperiment::Settings::visit_problem(const std::string& problem, Fields& v) {
  ModelConfig& model = models[problem];
  v.section("model", [&](Fields& s) {
    s("name", model.name, one_of(nn::model_names()));
    s("hidden", model.hidden, at_least(1));
    s("batch_norm", model.batch_norm);
    s("activation", model.activation, one_of({"relu", "swish"}));
    s("efficient_activation", model.efficient_activation);
    s("inplace_relu", model.inplace_relu);
    s("memory_format", model.memory_format, one_of({"auto", "contiguous", "channels_last"}));
  });
}

void ReweightingExperiment::Settings::defaults(run::RunConfig& config) const {
  config.engine.early_stopping().metric("valid/balanced_acc").mode(Mode::kMax);
}

run::DependencyConfig ReweightingExperiment::Settings::default_dependencies(
    const run::RunConfig& config) const {
  run::DependencyConfig graph;
  if (config.problems.count("reweighter")) {
    graph.u2l["reweighter"] = {"classifier"};
    graph.l2u["classifier"] = {"reweighter"};
  }
  return graph;
}

void ReweightingExperiment::Settings::check(const run::RunConfig& c) const {
  for (const auto& [name, p] : c.problems) {
    const std::string path = "problems." + name;
    const bool classifier = name == "classifier";
    const std::string model_name = model(name).name;
    if (classifier == (model_name == "mwn")) {
      c.fail(path + ".model.name",
             classifier ? "the classifier needs an image classifier (cnn, resnet32, resnet50 or "
                          "one a program registered), not mwn"
                        : "the reweighter's model must be mwn, got '" + model_name + "'");
    }
    const ModelConfig m = model(name);
    const bool resnet = m.name == "resnet32" || m.name == "resnet50";
    if (m.batch_norm && m.name != "cnn") {
      c.fail(path + ".model.batch_norm",
             "applies to cnn (the ResNets always have batch norm; mwn has none), not '" + m.name +
                 "'");
    }
    for (const auto& [key, set] :
         {std::pair<const char*, bool>{"activation", m.activation != "relu"},
          {"efficient_activation", m.efficient_activation},
          {"inplace_relu", m.inplace_relu}}) {
      if (!resnet && set) {
        c.fail(path + ".model." + key, "applies to resnet32 and resnet50, not '" + m.name + "'");
      }
    }
    if (m.inplace_relu && m.activation != "relu") {
      c.fail(path + ".model.inplace_relu", "means in-place ReLU, and the activation is '" +
                                               m.activation + "': use model.efficient_activation");
    }
    if (!resnet && m.memory_format != "auto" && m.memory_format != "contiguous") {
      c.fail(path + ".model.memory_format",
             "applies to resnet32 and resnet50, not '" + m.name + "'");
    }
  }
  const bool has_reweighter = c.problems.count("reweighter") > 0;
  for (const auto& [method, what] :
       {std::pair<const char*, const char*>{"l2rw", "l2rw (Learning to Reweight)"},
        {"class_balanced", "class_balanced (class-balanced cross-entropy, one level)"},
        {"logit_adjusted", "logit_adjusted (logit adjustment, one level)"}}) {
    if (reweighting.method == method && has_reweighter) {
      c.fail("reweighting.method",
             std::string(what) + " has no weight net: remove problems.reweighter");
    }
  }
  if (reweighting.method == "class_mwn" && !has_reweighter) {
    c.fail("reweighting.method", "class_mwn needs a 'reweighter' problem (its weight net)");
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
