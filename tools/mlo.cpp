// The `mlo` tool: the library's command line (mlo::cli::main: run, compare, plot, experiments,
// with the ready-made experiments of libmlo_run) plus the tool's own commands, which no
// library holds: launch (local ranks), plan (a checkpointing plan) and ablate (the memory
// ablation, with its per-rank helper ablate-rank).
#include "ablate/ablate.h"
#include "launch/launch.h"
#include "plan/plan.h"

#include <mlo/cli/main.h>

int main(int argc, char** argv) {
  using mlo::cli::Command;
  const std::vector<std::shared_ptr<Command>> tools{
      std::make_shared<mlo::cli::LaunchCommand>(), std::make_shared<mlo::cli::PlanCommand>(),
      std::make_shared<mlo::cli::AblateCommand>(), std::make_shared<mlo::cli::AblateRankCommand>()};
  return mlo::cli::main(argc, argv, tools);
}
