#include "plan.h"

#include <cmath>

#include <mlo/base/error.h>
#include <mlo/memory/planner.h>
#include <mlo/nn/chain.h>
#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/run/yaml.h>

#include <CLI/CLI.hpp>

#include <cctype>
#include <iostream>
#include <optional>

namespace mlo {
namespace cli {
namespace {

// "40%" -> fraction; "512M", "2G", "123456" -> bytes.
void apply_budget(const std::string& text, CheckpointingOptions& options) {
  MLO_CHECK(!text.empty(), "--budget: empty value");
  try {
    size_t used = 0;
    const double number = std::stod(text, &used);
    MLO_CHECK(std::isfinite(number), "--budget ", text, ": must be a finite number");
    const std::string unit = text.substr(used);
    if (unit == "%") {
      MLO_CHECK(number > 0 && number <= 100, "--budget ", text, ": a percentage in (0, 100]");
      options.budget_fraction(number / 100.0).budget_bytes(0);
      return;
    }
    double scale = 1;
    if (unit == "K" || unit == "k")
      scale = 1024.0;
    else if (unit == "M" || unit == "m")
      scale = 1024.0 * 1024.0;
    else if (unit == "G" || unit == "g")
      scale = 1024.0 * 1024.0 * 1024.0;
    else
      MLO_CHECK(unit.empty(), "--budget ", text, ": unknown unit '", unit, "' (use %, K, M, G)");
    MLO_CHECK(number > 0, "--budget ", text, ": must be > 0");
    // (bytes as a 64-bit count; no machine has 2^60 bytes)
    MLO_CHECK(number * scale <= std::ldexp(1.0, 60), "--budget ", text,
              ": more bytes than any machine has (at most 1024P, 2^60 bytes)");
    options.budget_bytes(static_cast<int64_t>(number * scale));
  } catch (const std::invalid_argument&) {
    throw Error("--budget " + text + ": expected a number, like 40% or 512M");
  } catch (const std::out_of_range&) {
    throw Error("--budget " + text + ": the number is out of range");
  }
}

}  // namespace

std::string plan_command(const run::RunConfig& config, const PlanOptions& options) {
  // The flags are read and checked before the experiment is built (a bad one is named at once).
  std::optional<Checkpointing> strategy;
  if (!options.strategy.empty()) {
    strategy = from_string<Checkpointing>(options.strategy, "--strategy");
  }
  std::optional<double> max_overhead;
  if (!options.max_overhead.empty()) {
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(options.max_overhead, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MLO_CHECK(used > 0 && used == options.max_overhead.size(), "--max-overhead ",
              options.max_overhead, ": expected a number, like 0.3");
    max_overhead = value;
  }
  const auto with_flags = [&](CheckpointingOptions plan_options) {
    const bool configured = plan_options.strategy() != Checkpointing::kNone;
    if (strategy) plan_options.strategy(*strategy);
    if (max_overhead) plan_options.max_overhead(*max_overhead);
    // (the planner's own checks, named by the flags that set them)
    try {
      memory::validate_options(plan_options);
    } catch (const Error& e) {
      throw Error(std::string("mlo plan: ") + e.what() +
                  " (--max-overhead, --budget or the configuration's checkpointing keys)");
    }
    if (!options.budget.empty()) {
      apply_budget(options.budget, plan_options);
      if (!strategy && !configured) {
        plan_options.strategy(Checkpointing::kOptimal);  // a budget asks for the optimal plan
      }
    }
    return plan_options;
  };
  with_flags(CheckpointingOptions());

  const auto experiment = run::make_experiment(config);
  run::MemoryTarget& target = run::memory_target(*experiment, config.experiment, "mlo plan");
  const std::string name = options.problem.empty() ? target.main_problem() : options.problem;
  auto problem = experiment->problem(name);
  auto* chain = dynamic_cast<nn::ChainImpl*>(&problem->module());
  MLO_CHECK(chain, "mlo plan: the model of problem '", name,
            "' is not an mlo::nn::Chain (a chain of blocks), so it has no checkpointing plan");
  // The problem's resolved settings, then what the command line changes.
  const CheckpointingOptions plan_options = with_flags(problem->config().checkpointing());
  const Batch batch = target.sample_batch(name).to(problem->device());
  const auto plan = memory::plan_checkpointing(*chain, batch.data, plan_options);
  std::string text = "checkpointing plan for problem '" + name + "' (" +
                     std::to_string(chain->size()) + " blocks, batch " +
                     std::to_string(batch.size()) +
                     (experiment->synthetic() ? ", SYNTHETIC data" : "") + ")\n" + plan.to_string();
  std::cout << text;
  return text;
}

CLI::App* PlanCommand::add_to(CLI::App& app) {
  auto* plan =
      app.add_subcommand("plan", "Print the activation-checkpointing plan of an experiment's model");
  plan->add_option("config", config_, "experiment YAML")->required();
  plan->add_option("--set", overrides_, "override a key (repeatable)");
  plan->add_option("--problem", options_.problem,
                   "which problem's model (default: the experiment's default problem)");
  plan->add_option("--strategy", options_.strategy,
                   "none, uniform, sqrt, optimal or min_memory (default: as configured)");
  plan->add_option("--budget", options_.budget,
                   "memory budget: 40% of the no-checkpoint peak, or bytes (512M, 2G)");
  plan->add_option("--max-overhead", options_.max_overhead,
                   "min_memory: largest time overhead, e.g. 0.3");
  return plan;
}

int PlanCommand::run() {
  plan_command(run::load_run_config(config_, overrides_), options_);
  return 0;
}

}  // namespace cli
}  // namespace mlo
