#pragma once
// Part of the mlo tool (tools/): `mlo plan`, the checkpointing plan of an experiment's model.

#include <mlo/cli/main.h>
#include <mlo/run/config.h>

#include <string>
#include <vector>

namespace mlo {
namespace cli {

struct PlanOptions {
  /// "" = the experiment's main problem (`run::MemoryTarget::main_problem`).
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

/// The `plan` subcommand: `mlo plan CONFIG [--set k=v]... [--problem P] [--strategy S]
/// [--budget B] [--max-overhead X]`.
class PlanCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override;
  int run() override;

 private:
  std::string config_;
  std::vector<std::string> overrides_;
  PlanOptions options_;
};

}  // namespace cli
}  // namespace mlo
