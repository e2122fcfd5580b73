#pragma once
// Part of the mlo tool (src/cli): `mlo plan`, the checkpointing plan of an experiment's model.

#include <mlo/run/config.h>

#include <string>

namespace mlo {
namespace cli {

struct PlanOptions {
  /// "" = the experiment's default problem (`run::Experiment::default_problem`).
  std::string problem;
  /// "" = the problem's configured strategy; else none|uniform|sqrt|optimal|min_memory.
  std::string strategy;
  /// "" = as configured; "40%" (of the no-checkpoint peak) or bytes with an optional K/M/G suffix.
  std::string budget;
  /// < 0 = as configured; the time-overhead cap of min_memory.
  std::string max_overhead;  ///< "" = as configured
};

/// Profiles the problem's model on one training batch and prints the per-block decisions, the
/// predicted peak and the predicted time. Returns the text it printed.
std::string plan_command(const run::RunConfig& config, const PlanOptions& options);

}  // namespace cli
}  // namespace mlo
