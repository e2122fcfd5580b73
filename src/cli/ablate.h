#pragma once
// Part of the mlo tool (src/cli): `mlo ablate`, the memory ablation table of an experiment
// (the measuring is run::run_ablation, the outputs run/ablation_report.h).

#include "ablation.h"

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

/// The `ablate` subcommand's arguments, added to `app` by `add_ablate_command`; main() asks
/// `parsed()` and then calls `run()` inside its error handling.
struct AblateCommand {
  CLI::App* command = nullptr;
  std::string config_path;
  std::vector<std::string> overrides;
  AblateOptions options;
  std::vector<std::string> rows;
  /// The preset of `--quick` (the options the user did not give).
  bool quick = false;
  bool parsed() const;
  /// Runs `ablate_command`; returns the exit status.
  int run();
};
std::unique_ptr<AblateCommand> add_ablate_command(CLI::App& app);

/// `mlo ablate-rank` (not for users: `mlo ablate` starts one per rank of a data-parallel row
/// under `mlo launch`'s supervision): measures the row in this process and writes
/// `<result>/rank<r>.json`.
struct AblateRankCommand {
  CLI::App* command = nullptr;
  std::string config_path;
  std::vector<std::string> overrides;
  std::string problem;
  int64_t iterations = 2;
  std::string result_dir;
  bool parsed() const;
  int run();
};
std::unique_ptr<AblateRankCommand> add_ablate_rank_command(CLI::App& app);

}  // namespace cli
}  // namespace mlo
