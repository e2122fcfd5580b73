#pragma once
// Part of the mlo tool (tools/): `mlo ablate`, the memory ablation table of an experiment
// (the measuring is run::run_ablation, the outputs ablation_report.h).

#include "ablation.h"

#include <mlo/cli/main.h>

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mlo {
namespace cli {

struct AblateOptions {
  /// Output folder ("" = runs/<name>_ablation).
  std::string out_dir;
  run::AblationOptions ablation;
  /// The mlo program that measures the per-rank rows (`mlo ablate-rank`); "" = this program.
  std::string program;
  /// Continue the ablation in `out_dir`: rows it finished (rows/<key>.json, measured with the
  /// same settings) are kept, the others measured.
  bool resume = false;
  /// Replace the ablation in `out_dir`: its files are moved into `replaced-<time>/` first.
  bool overwrite = false;
};

/// Runs the ablation of `config_path` with `overrides`: progress and logs on stderr, the
/// Markdown table alone on stdout; ablation.{md,csv,json,png} in the output folder, the tables
/// rewritten after every row (with rows/<key>.json, what `resume` keeps). An output folder that
/// holds an ablation is refused unless `resume` or `overwrite`. Returns the result (for tests).
run::AblationResult ablate_command(const std::string& config_path,
                                   const std::vector<std::string>& overrides,
                                   const AblateOptions& options);

/// The `ablate` subcommand: its arguments, and `run` calls `ablate_command`.
struct AblateCommand : Command {
  CLI::App* add_to(CLI::App& app) override;
  int run() override;

  CLI::App* command = nullptr;
  std::string config_path;
  std::vector<std::string> overrides;
  AblateOptions options;
  std::vector<std::string> rows;
  /// The preset of `--quick` (the options the user did not give).
  bool quick = false;
};

/// `mlo ablate-rank` (not for users: `mlo ablate` starts one per rank of a data-parallel row
/// under `mlo launch`'s supervision): measures the row in this process and writes
/// `<result>/rank<r>.json`.
struct AblateRankCommand : Command {
  CLI::App* add_to(CLI::App& app) override;
  int run() override;

  CLI::App* command = nullptr;
  std::string config_path;
  std::vector<std::string> overrides;
  std::string problem;
  int64_t iterations = 2;
  std::string result_dir;
};

}  // namespace cli
}  // namespace mlo
