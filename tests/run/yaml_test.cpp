// Configuration from YAML: every bad input fails before training with file, line and key path.
#include <mlo/base/error.h>
#include <mlo/run/yaml.h>
#include <mlo/hypergrad/darts.h>
#include <mlo/hypergrad/sama.h>
#include <mlo/hypergrad/unrolled.h>
#include <mlo/run/builders.h>

#include "problems/reweighting/experiment.h"
#include "support/names.h"

#include <catch2/catch.hpp>

#include <cmath>

namespace yaml_test {

using Catch::Matchers::Contains;
using mlo::run::parse_run_config;
using Settings = mlo::problems::reweighting::ReweightingExperiment::Settings;

namespace {

const char* kValid = R"(experiment: reweighting
name: tiny
engine:
  train_iters: 10
data:
  dataset: synthetic
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.1}
  reweighter:
    model: {name: mwn}
    optimizer: {name: adam, lr: 0.001}
)";

}  // namespace

TEST_CASE("YAML: a valid file reads with defaults filled in", "[io][yaml]") {
  const auto c = parse_run_config(kValid, "tiny.yaml");
  CHECK(c.engine.train_iters() == 10);
  CHECK(c.engine.valid_step() == 500);  // default
  CHECK(c.problems.at("classifier").optimizer.lr == 0.1);
  CHECK(c.problems.at("reweighter").optimizer.name == "adam");
  CHECK(c.problems.at("classifier").config.method().name() == "darts");
  // The experiment's own keys, in its settings.
  CHECK(c.settings_as<Settings>().data.dataset == "synthetic");
  CHECK(c.settings_as<Settings>().model("reweighter").name() == "mwn");
}

TEST_CASE("YAML: the resolved config reads back to the same config", "[io][yaml]") {
  auto c = parse_run_config(kValid, "tiny.yaml",
                            {"problems.classifier.scheduler.name=multistep",
                             "problems.classifier.scheduler.milestones=[5,8]"});
  const std::string text = mlo::run::to_yaml(c);
  const auto again = parse_run_config(text, "resolved.yaml");
  CHECK(mlo::run::to_yaml(again) == text);
  CHECK(again.problems.at("classifier").scheduler.milestones == std::vector<int64_t>{5, 8});
}

TEST_CASE("YAML: floats are written as the shortest exact text, each with a point", "[io][yaml]") {
  auto c = parse_run_config(
      kValid, "tiny.yaml",
      {"problems.classifier.optimizer.weight_decay=0.0005", "problems.classifier.optimizer.lr=0.1",
       "problems.reweighter.optimizer.lr=1e22", "problems.reweighter.optimizer.weight_decay=-0.0",
       "data.imbalance=100"});
  const std::string text = mlo::run::to_yaml(c);
  // A point in each (YAML 1.1 readers take "5e-04" or "100" for no float), no 17-digit tails.
  CHECK_THAT(text, Contains("weight_decay: 5.0e-04") && Contains("lr: 0.1\n") &&
                       Contains("lr: 1.0e+22") && Contains("weight_decay: -0.0") &&
                       Contains("imbalance: 100.0"));
  CHECK_THAT(text, !Contains("0000000000"));
  const auto again = parse_run_config(text, "resolved.yaml");
  CHECK(again.problems.at("classifier").optimizer.weight_decay == 0.0005);
  CHECK(again.problems.at("classifier").optimizer.lr == 0.1);
  CHECK(again.problems.at("reweighter").optimizer.lr == 1e22);
  CHECK(std::signbit(again.problems.at("reweighter").optimizer.weight_decay));
  CHECK(mlo::run::to_yaml(again) == text);
}

TEST_CASE("YAML: an unknown key names file, line and path, and suggests", "[io][yaml]") {
  const std::string text = std::string(kValid) + "    lerning_rate: 3\n";
  REQUIRE_THROWS_WITH(parse_run_config(text, "x.yaml"),
                      mlo_test::Names({"x.yaml:14:5: problems.reweighter.lerning_rate:", "unknown"}));
  const std::string typo = "experiment: reweighting\nengine:\n  train_iter: 5\n";
  REQUIRE_THROWS_WITH(parse_run_config(typo, "t.yaml"),
                      mlo_test::Names({"t.yaml:3:3: engine.train_iter:", "'train_iters'"}));
}

TEST_CASE("YAML: text after the first document is refused with its position, never ignored",
          "[io][yaml]") {
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kValid) + "---\nseed: 9\n", "two.yaml"),
                      mlo_test::Names({"two.yaml:14:1: (top level):", "'---'"}));
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kValid) + "...\nseed: 9\n", "end.yaml"),
                      mlo_test::Names({"end.yaml:15:1: (top level):", "'...'"}));
  // A token the parser cannot place makes yaml-cpp start an empty document at the same place
  // again and again; the reader stops at the second.
  REQUIRE_THROWS_WITH(parse_run_config("\n,\n", "comma.yaml"),
                      mlo_test::Names({"comma.yaml:2:1:", "','"}));
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kValid) + "...\n,\n", "late.yaml"),
                      mlo_test::Names({"late.yaml:15:1:", "','"}));
}

TEST_CASE("YAML: a wrong type names the key and the value", "[io][yaml]") {
  const std::string text = "experiment: reweighting\nengine:\n  train_iters: lots\n";
  REQUIRE_THROWS_WITH(parse_run_config(text, "t.yaml"),
                      mlo_test::Names({"t.yaml:3:16: engine.train_iters:", "'lots'"}));
  REQUIRE_THROWS_WITH(parse_run_config("experiment: reweighting\ndata: [1, 2]\n", "t.yaml"),
                      Contains("t.yaml:2:7: data: must be a mapping"));
}

TEST_CASE("YAML: an out-of-range value names the key and the range", "[io][yaml]") {
  const std::string text =
      "experiment: reweighting\nproblems:\n  classifier:\n    optimizer:\n      lr: -0.1\n";
  REQUIRE_THROWS_WITH(
      parse_run_config(text, "r.yaml"),
      mlo_test::Names({"r.yaml:5:11: problems.classifier.optimizer.lr:", "-0.1"}));
  REQUIRE_THROWS_WITH(parse_run_config("experiment: reweighting\ndata: {dataset: mnist}\n",
                                       "d.yaml"),
                      mlo_test::Names({"data.dataset:", "cifar10", "fashion_mnist", "synthetic", "'mnist'"}));
}

TEST_CASE("YAML: --set overrides any key and its errors name the override", "[io][yaml]") {
  const auto c = parse_run_config(kValid, "tiny.yaml", {"engine.train_iters=77", "data.root=/d"});
  CHECK(c.engine.train_iters() == 77);
  CHECK(c.settings_as<Settings>().data.root == "/d");
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"engine.valid_step=-1"}),
                      mlo_test::Names({"tiny.yaml (--set engine.valid_step=-1): engine.valid_step:", ">= 0"}));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"engine.train_iters"}),
                      Contains("expected key.path=value"));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"engine.nope=1"}),
                      mlo_test::Names({"tiny.yaml (--set engine.nope=1): engine.nope:"}));
}

TEST_CASE("YAML: rules across keys name the key", "[io][yaml]") {
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"data.meta_size=15"}),
                      mlo_test::Names({"tiny.yaml (--set data.meta_size=15): data.meta_size:", "classes"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"problems.reweighter.model.name=cnn"}),
      mlo_test::Names({"tiny.yaml (--set problems.reweighter.model.name=cnn): "
                       "problems.reweighter.model.name:",
                       "mwn"}));
  // Each model reads its own keys only: another model's key is unknown, with the keys it has.
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"problems.reweighter.model.batch_norm=true"}),
      mlo_test::Names({"tiny.yaml (--set problems.reweighter.model.batch_norm=true): "
                       "problems.reweighter.model.batch_norm:",
                       "hidden", "name"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"problems.classifier.model.activation=swish"}),
      mlo_test::Names({"tiny.yaml (--set problems.classifier.model.activation=swish): "
                       "problems.classifier.model.activation:"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml",
                       {"problems.classifier.model.name=resnet32",
                        "problems.classifier.model.activation=gelu"}),
      mlo_test::Names({"problems.classifier.model.activation:", "'gelu'"}));
  const auto swish = parse_run_config(kValid, "tiny.yaml",
                                      {"problems.classifier.model.name=resnet32",
                                       "problems.classifier.model.activation=swish",
                                       "problems.classifier.model.efficient_activation=true"});
  const std::string resolved = mlo::run::to_yaml(swish);
  CHECK_THAT(resolved, Contains("activation: swish"));
  CHECK_THAT(resolved, Contains("efficient_activation: true"));
  const auto restore =
      parse_run_config(kValid, "tiny.yaml", {"problems.classifier.darts.exact_restore=false"});
  const auto* darts = restore.problems.at("classifier").config.method_as<mlo::DartsOptions>();
  REQUIRE(darts);
  CHECK_FALSE(darts->exact_restore());
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"dependencies.u2l.teacher=[x]"}),
                      Contains("names problem 'teacher', which is not under problems"));
  // Loss-scaling options act only with loss scaling on: set without it they are refused.
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"problems.classifier.loss_scaling.init_scale=1024"}),
      mlo_test::Names({"tiny.yaml (--set problems.classifier.loss_scaling.init_scale=1024): "
                       "problems.classifier.loss_scaling.init_scale:",
                       "loss scaling"}));
  const auto scaled =
      parse_run_config(kValid, "tiny.yaml",
                       {"problems.classifier.loss_scaling.init_scale=1024",
                        "problems.classifier.loss_scaling.enabled=true"});
  CHECK(scaled.problems.at("classifier").config.loss_scaling().value().init_scale() == 1024);
  // (the resolved file, which lists a disabled section's defaults, reads back)
  const auto plain = parse_run_config(kValid, "tiny.yaml");
  CHECK(mlo::run::to_yaml(parse_run_config(mlo::run::to_yaml(plain), "r.yaml")) ==
        mlo::run::to_yaml(plain));
  REQUIRE_THROWS_WITH(parse_run_config("engine: {train_iters: 5\n", "s.yaml"),
                      Contains("s.yaml:2:1: YAML syntax error"));
}

TEST_CASE("YAML: a missing file is named", "[io][yaml]") {
  REQUIRE_THROWS_WITH(mlo::run::load_run_config("/nonexistent/x.yaml"),
                      Contains("the configuration file '/nonexistent/x.yaml' does not exist"));
}

TEST_CASE("YAML: data.valid_size and data.shuffle_classes are keys with documented defaults",
          "[io][yaml]") {
  const auto defaults = parse_run_config(kValid, "tiny.yaml");
  CHECK(defaults.settings_as<Settings>().data.valid_size == 1000);
  CHECK(defaults.settings_as<Settings>().data.shuffle_classes);
  const auto c =
      parse_run_config(kValid, "tiny.yaml", {"data.valid_size=200", "data.shuffle_classes=false"});
  CHECK(c.settings_as<Settings>().data.valid_size == 200);
  CHECK_FALSE(c.settings_as<Settings>().data.shuffle_classes);
  const auto again = parse_run_config(mlo::run::to_yaml(c), "resolved.yaml");
  CHECK(again.settings_as<Settings>().data.valid_size == 200);
  CHECK_FALSE(again.settings_as<Settings>().data.shuffle_classes);
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"data.valid_size=15"}),
                      mlo_test::Names({"tiny.yaml (--set data.valid_size=15): data.valid_size:", "classes"}));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"data.valid_size=-10"}),
                      mlo_test::Names({"tiny.yaml (--set data.valid_size=-10): data.valid_size:", ">= 0"}));
  // No validation set is fine only without validation.
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"data.valid_size=0"}),
                      Contains("data.valid_size: is 0 (no validation set) while "
                               "engine.valid_step is 500"));
  CHECK_NOTHROW(
      parse_run_config(kValid, "tiny.yaml", {"data.valid_size=0", "engine.valid_step=0"}));
}

TEST_CASE("YAML: a lower-level setting on a problem with no parent names file, line and key",
          "[io][yaml]") {
  // The reweighter is the top level: nothing steps after its unroll, so these would be ignored.
  REQUIRE_THROWS_WITH(
      parse_run_config(std::string(kValid) + "    unroll_steps: 3\n", "x.yaml"),
      mlo_test::Names({"x.yaml:14:19: problems.reweighter.unroll_steps:"}) &&
          Contains("'reweighter' has no problem above it") && Contains("top level"));
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kValid) + "    warmup_steps: 5\n", "x.yaml"),
                      mlo_test::Names({"x.yaml:14:19: problems.reweighter.warmup_steps:", "'reweighter'"}));
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kValid) + "    roll_back: true\n", "x.yaml"),
                      mlo_test::Names({"x.yaml:14:16: problems.reweighter.roll_back:", "'reweighter'"}));
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kValid) + "    method: cg\n", "x.yaml"),
                      mlo_test::Names({"x.yaml:14:13: problems.reweighter.method:", "'reweighter'"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(std::string(kValid) + "    neumann: {iterations: 5}\n", "x.yaml"),
      mlo_test::Names({"x.yaml:14:27: problems.reweighter.neumann.iterations:", "'reweighter'"}));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"problems.reweighter.unroll_steps=2"}),
                      mlo_test::Names({"tiny.yaml (--set problems.reweighter.unroll_steps=2): "
                                       "problems.reweighter.unroll_steps:",
                                       "'reweighter'"}));

  // The baseline (no reweighter): the classifier has no parent, so its method does nothing.
  const std::string baseline = "experiment: reweighting\nproblems:\n  classifier:\n"
                               "    model: {name: cnn}\n    method: neumann\n";
  REQUIRE_THROWS_WITH(parse_run_config(baseline, "b.yaml"),
                      Contains("b.yaml:5:13: problems.classifier.method: acts only on a lower "
                               "problem") &&
                          Contains("no reweighter is configured"));

  // Defaults written out (as in a resolved config.yaml) and the classifier under a reweighter
  // are fine.
  CHECK_NOTHROW(
      parse_run_config(std::string(kValid) + "    unroll_steps: 1\n    method: darts\n", "x.yaml"));
  const auto lower =
      parse_run_config(kValid, "tiny.yaml",
                       {"problems.classifier.unroll_steps=5", "problems.classifier.method=neumann",
                        "problems.classifier.roll_back=true"});
  CHECK(lower.problems.at("classifier").config.unroll_steps() == 5);
  CHECK(lower.problems.at("classifier").config.method().name() == "neumann");
}

TEST_CASE("YAML: enum keys take the names of the enum's table, and list them when unknown",
          "[io][yaml]") {
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"problems.classifier.precision=fp8"}),
                      mlo_test::Names({"problems.classifier.precision:", "fp32", "bf16", "fp16", "'fp8'"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(std::string(kValid) + "    checkpointing: {strategy: full}\n", "x.yaml"),
      mlo_test::Names({"x.yaml:14:31: problems.reweighter.checkpointing.strategy:", "uniform",
                       "min_memory", "'full'"}));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"engine.early_stopping.mode=up"}),
                      mlo_test::Names({"tiny.yaml (--set engine.early_stopping.mode=up): engine.early_stopping.mode:",
                                       "min", "max"}));
}

TEST_CASE("YAML: early stopping watches a validation metric", "[io][yaml]") {
  const auto c = parse_run_config(kValid, "tiny.yaml", {"engine.early_stopping.enabled=true"});
  CHECK(c.engine.early_stopping().metric() == "valid/balanced_acc");
  CHECK_NOTHROW(parse_run_config(kValid, "tiny.yaml", {"engine.early_stopping.metric=valid/loss"}));
  CHECK_NOTHROW(
      parse_run_config(kValid, "tiny.yaml", {"engine.early_stopping.metric=valid/acc/class3"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"engine.early_stopping.metric=balanced_acc"}),
      Contains("engine.early_stopping.metric: must be a validation metric: valid/acc, "
               "valid/balanced_acc"));
  // A class's accuracy is named by its metric segment, listed when the name is not one.
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"engine.early_stopping.metric=valid/acc/class 3"}),
      Contains("valid/acc/<class> (<class>: class0, class1,") &&
          Contains("got 'valid/acc/class 3'"));
  CHECK_NOTHROW(parse_run_config(kValid, "tiny.yaml",
                                 {"data.dataset=fashion_mnist",
                                  "engine.early_stopping.metric=valid/acc/ankle_boot"}));
}

TEST_CASE("YAML: early stopping without a validation split is refused, saying why",
          "[io][yaml]") {
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml",
                       {"engine.early_stopping.enabled=true", "data.valid_size=0"}),
      Contains("data.valid_size: is 0 (no validation split) while engine.early_stopping is "
               "enabled") &&
          Contains("valid/balanced_acc"));
}

// Inputs the fuzzer (scripts/fuzz.sh) found escaping as yaml-cpp or standard exceptions; each must
// be an mlo::Error that names where.
TEST_CASE("YAML: odd but valid YAML is rejected as a named error", "[io][yaml]") {
  using mlo::Error;
  // A top-level scalar with an override used to index into it (YAML::BadSubscript).
  CHECK_THROWS_MATCHES(parse_run_config("just text\n", "t.yaml", {"engine.train_iters=3"}), Error,
                       Catch::Matchers::Message("t.yaml:1:1: (top level): must be a "
                                                "mapping (key: value lines)"));
  CHECK_THROWS_AS(parse_run_config("[1, 2]\n", "t.yaml"), Error);
  // Keys that are not plain names (YAML::TypedBadConversion).
  CHECK_THROWS_MATCHES(
      parse_run_config("experiment: reweighting\n[a, b]: 1\n", "k.yaml"), Error,
      Catch::Matchers::Message("k.yaml:2:1: (top level): keys must be plain names"));
  CHECK_THROWS_WITH(parse_run_config("experiment: reweighting\nproblems: {{a: 1}: {}}\n", "k.yaml"),
                    mlo_test::Names({"k.yaml:2:12: problems:", "plain names"}));
  CHECK_THROWS_WITH(parse_run_config("experiment: reweighting\ndependencies: {u2l: {[x]: a}}\n", "k.yaml"),
                    mlo_test::Names({"k.yaml:2:", "dependencies.u2l:"}));
  // A list of problem names holding a mapping.
  CHECK_THROWS_WITH(parse_run_config("experiment: reweighting\ndependencies: {u2l: {a: [b, {c: d}]}}\n", "d.yaml"),
                    mlo_test::Names({"d.yaml:2:29: dependencies.u2l.a:"}));
  // Numbers no setting can mean, which the writer could not read back.
  CHECK_THROWS_WITH(parse_run_config(std::string(kValid) + "seed: 1\n", "n.yaml",
                                     {"problems.classifier.optimizer.lr=.inf"}),
                    mlo_test::Names({"n.yaml (--set problems.classifier.optimizer.lr=.inf): "
                                     "problems.classifier.optimizer.lr:"}));
  CHECK_THROWS_WITH(parse_run_config("experiment: reweighting\ndata: {imbalance: .nan}\n", "n.yaml"),
                    mlo_test::Names({"n.yaml:2:19: data.imbalance:", ".nan"}));
}

TEST_CASE("YAML: sama and unrolled sections select and configure the methods", "[io][yaml]") {
  // The classifier is the lower problem of the reweighting pair.
  const std::string lower = std::string(kValid).replace(
      std::string(kValid).find("  reweighter:"), 0,
      "    method: unrolled\n    sama: {alpha: 0.05}\n"
      "    unrolled: {checkpointing: binomial, snapshots: 6}\n");
  const auto config = parse_run_config(lower, "u.yaml");
  const auto& c = config.problems.at("classifier").config;
  CHECK(c.method().name() == "unrolled");
  // The problem's config carries the selected method's options; the sama section, of a method
  // that does not run, is read and validated, and kept only in the file (the selection is
  // explicit, so it is accepted).
  const auto* unrolled = c.method_as<mlo::UnrolledOptions>();
  REQUIRE(unrolled);
  CHECK(unrolled->checkpointing() == mlo::UnrollCheckpointing::kBinomial);
  CHECK(unrolled->snapshots() == 6);
  const auto as_sama = parse_run_config(lower, "u.yaml", {"problems.classifier.method=sama"});
  REQUIRE(as_sama.problems.at("classifier").config.method_as<mlo::SamaOptions>());
  CHECK(as_sama.problems.at("classifier").config.method_as<mlo::SamaOptions>()->alpha() == 0.05);
  const auto sama = parse_run_config(kValid, "tiny.yaml", {"problems.classifier.method=sama"});
  CHECK(sama.problems.at("classifier").config.method().name() == "sama");
  REQUIRE_THROWS_WITH(
      parse_run_config(std::string(kValid).replace(std::string(kValid).find("  reweighter:"), 0,
                                                   "    unrolled: {checkpointing: revolve}\n"),
                       "b.yaml"),
      mlo_test::Names({"b.yaml:11:31: problems.classifier.unrolled.checkpointing:", "binomial",
                       "'revolve'"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(std::string(kValid).replace(std::string(kValid).find("  reweighter:"), 0,
                                                   "    sama: {alpha: -1}\n"),
                       "s.yaml"),
      mlo_test::Names({"s.yaml:11:19: problems.classifier.sama.alpha:", "-1"}));
  // Cross-field rules of unrolled, with the key's position.
  const auto with = [](const std::string& line) {
    return std::string(kValid).replace(std::string(kValid).find("  reweighter:"), 0, line);
  };
  REQUIRE_THROWS_WITH(
      parse_run_config(with("    method: unrolled\n    unrolled: {snapshots: 3}\n"), "c.yaml"),
      Contains("c.yaml:12:") &&
          Contains("problems.classifier.unrolled.snapshots: needs unrolled.checkpointing: "
                   "binomial"));
  REQUIRE_THROWS_WITH(
      parse_run_config(with("    method: unrolled\n    unrolled: {budget_bytes: 4096}\n"),
                       "c.yaml"),
      mlo_test::Names({"c.yaml:12:", "problems.classifier.unrolled.budget_bytes:", "checkpointing"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(
          with("    method: unrolled\n"
               "    unrolled: {checkpointing: binomial, snapshots: 3, budget_bytes: 4096}\n"),
          "c.yaml"),
      Contains("c.yaml:12:") &&
          Contains("problems.classifier.unrolled.budget_bytes: give snapshots or budget_bytes, "
                   "not both (snapshots is 3)"));
}

TEST_CASE("YAML: the core's rules across keys name the file, line and key, before anything is "
          "built",
          "[io][yaml]") {
  const auto with = [](const std::string& lines) {
    return std::string(kValid).replace(std::string(kValid).find("  reweighter:"), 0, lines);
  };
  // (ProblemConfig::validate and EngineConfig::validate: the rules the engine applies to a
  // configuration built in code)
  REQUIRE_THROWS_WITH(
      parse_run_config(with("    roll_back: true\n    gradient_accumulation: 2\n"), "r.yaml"),
      mlo_test::Names({"r.yaml:11:16: problems.classifier.roll_back:", "gradient_accumulation"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(with("    checkpointing: {strategy: optimal}\n"), "z.yaml",
                       {"engine.strategy=zero3"}),
      mlo_test::Names({"z.yaml:11:31: problems.classifier.checkpointing.strategy:", "optimal",
                       "zero3"}));
  CHECK_NOTHROW(parse_run_config(with("    checkpointing: {strategy: optimal}\n"), "z.yaml"));
  REQUIRE_THROWS_WITH(parse_run_config(with("    offload: cpu\n"), "o.yaml"),
                      mlo_test::Names({"o.yaml:11:14: problems.classifier.offload:", "zero3",
                                       "strategy default"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "e.yaml",
                       {"engine.early_stopping.enabled=true", "engine.valid_step=0"}),
      mlo_test::Names({"e.yaml: engine.early_stopping:", "valid_step"}));
}

TEST_CASE("YAML: a section of a method that does not run needs an explicit method",
          "[io][yaml]") {
  const auto with = [](const std::string& lines) {
    return std::string(kValid).replace(std::string(kValid).find("  reweighter:"), 0, lines);
  };
  // Without `method`, darts runs: a neumann section would be silently ignored.
  REQUIRE_THROWS_WITH(
      parse_run_config(with("    neumann: {iterations: 5}\n"), "m.yaml"),
      Contains("m.yaml:11:27: problems.classifier.neumann.iterations: sets an option of method "
               "'neumann', but problems.classifier.method is not set, so 'darts' (the default) "
               "runs and the 'neumann' section has no effect; add 'method: neumann'"));
  // The same section beside an explicit method (in the file, or by --set) is kept for switching.
  CHECK(parse_run_config(with("    method: cg\n    neumann: {iterations: 5}\n"), "m.yaml")
            .problems.at("classifier")
            .config.method().name() == "cg");
  CHECK(parse_run_config(with("    method: darts\n    neumann: {iterations: 5}\n"), "m.yaml")
            .problems.at("classifier")
            .config.method().name() == "darts");
  const auto switched = parse_run_config(with("    neumann: {iterations: 5}\n"), "m.yaml",
                                         {"problems.classifier.method=neumann"});
  CHECK(switched.problems.at("classifier").config.method().name() == "neumann");
  // Whether a key is set is what the file says, not its value: a section at its defaults has
  // no effect either.
  CHECK_THROWS_WITH(parse_run_config(with("    cg: {iterations: 1, alpha: 1.0}\n"), "m.yaml"),
                    mlo_test::Names({"m.yaml:11:", "problems.classifier.cg.", "method: cg"}));
  CHECK_THROWS_WITH(parse_run_config(with("    cg: {}\n"), "m.yaml"),
                    mlo_test::Names({"m.yaml:11:", "problems.classifier.cg:", "method: cg"}));
  // The resolved config of a run with kept sections reads back.
  const auto kept = parse_run_config(with("    method: cg\n    neumann: {iterations: 5}\n"),
                                     "m.yaml");
  CHECK(mlo::run::to_yaml(parse_run_config(mlo::run::to_yaml(kept), "resolved.yaml")) ==
        mlo::run::to_yaml(kept));
}

TEST_CASE("YAML: the data-parallel keys reach the engine and problem configs", "[io][yaml]") {
  const std::string yaml = std::string(kValid).replace(
      std::string(kValid).find("  train_iters: 10\n"), 0,
      "  strategy: zero2\n  backend: gloo\n  timeout_s: 7.5\n");
  const std::string with_opt_out = std::string(yaml).replace(
      yaml.find("  reweighter:"), 0, "    data_parallel: false\n");
  const auto config = parse_run_config(with_opt_out, "d.yaml");
  CHECK(config.engine.strategy() == mlo::dist::Strategy::kZero2);
  CHECK(config.engine.backend() == mlo::dist::Backend::kGloo);
  CHECK(config.engine.timeout_s() == 7.5);
  CHECK_FALSE(config.problems.at("classifier").config.data_parallel());
  CHECK(config.problems.at("reweighter").config.data_parallel());  // the default
  // Written back and read again: the same values.
  const auto again = parse_run_config(mlo::run::to_yaml(config), "again.yaml");
  CHECK(again.engine.strategy() == mlo::dist::Strategy::kZero2);
  CHECK(again.engine.timeout_s() == 7.5);
  CHECK_FALSE(again.problems.at("classifier").config.data_parallel());

  REQUIRE_THROWS_WITH(
      parse_run_config(std::string(kValid).replace(std::string(kValid).find("  train_iters"), 0,
                                                   "  strategy: ddp\n"),
                       "e.yaml"),
      mlo_test::Names({"e.yaml:4:13: engine.strategy:", "distributed", "zero3", "'ddp'"}));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"engine.backend=mpi"}),
                      mlo_test::Names({"tiny.yaml (--set engine.backend=mpi): engine.backend:", "'mpi'"}));
  REQUIRE_THROWS_WITH(parse_run_config(kValid, "tiny.yaml", {"engine.timeout_s=0"}),
                      mlo_test::Names({"tiny.yaml (--set engine.timeout_s=0): engine.timeout_s:", "86400"}));
  REQUIRE_THROWS_WITH(
      parse_run_config(kValid, "tiny.yaml", {"problems.classifier.data_parallel=maybe"}),
      Contains("problems.classifier.data_parallel"));
}

}  // namespace yaml_test
