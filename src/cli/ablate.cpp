#include "ablate.h"

#include <mlo/io/yaml.h>
#include <mlo/run/ablation_report.h>

#include <CLI/CLI.hpp>

#include <iostream>

namespace mlo {
namespace cli {

run::AblationResult ablate_command(const std::string& config_path,
                                   const std::vector<std::string>& overrides,
                                   const AblateOptions& options) {
  std::string out_dir = options.out_dir;
  if (out_dir.empty()) out_dir = "runs/" + io::load_run_config(config_path, overrides).name + "_ablation";
  const auto result = run::run_ablation(
      config_path, overrides, options.ablation,
      [](const std::string& line) { std::cerr << "mlo ablate: " << line << std::endl; });
  std::cout << run::ablation_markdown(result) << std::flush;
  const auto files = run::write_ablation(out_dir, result);
  std::cout << "\nwrote " << files.markdown << ", " << files.csv << ", " << files.json;
  if (files.chart_error.empty()) {
    std::cout << ", " << files.png << "\n";
  } else {
    std::cout << "\nno chart: " << files.chart_error << "\n";
  }
  return result;
}

bool AblateCommand::parsed() const { return command && command->parsed(); }

int AblateCommand::run() {
  options.ablation.rows(rows);
  ablate_command(config_path, overrides, options);
  return 0;
}

std::unique_ptr<AblateCommand> add_ablate_command(CLI::App& app) {
  auto c = std::make_unique<AblateCommand>();
  c->command = app.add_subcommand(
      "ablate", "Memory ablation: peak, RSS, time and floor per memory feature (docs/memory-ablation.md)");
  auto* a = c->command;
  a->add_option("config", c->config_path, "experiment YAML (configs/ablation/)")->required();
  a->add_option("--set", c->overrides, "override a key for every row (repeatable)");
  a->add_option("--out", c->options.out_dir, "output folder (default runs/<name>_ablation)");
  a->add_option("--rows", c->rows,
                "only these rows (baseline always): precision accumulation checkpointing "
                "activations finite_difference all");
  a->add_option_function<int64_t>(
      "--iterations", [o = &c->options](int64_t n) { o->ablation.iterations(n); },
      "measured meta-iterations per row after one warm-up (default 2)");
  a->add_option_function<std::string>(
      "--problem", [o = &c->options](const std::string& p) { o->ablation.problem(p); },
      "the problem whose memory features vary (default: the experiment's default problem)");
  a->add_option_function<double>(
      "--budget", [o = &c->options](double b) { o->ablation.checkpoint_budget(b); },
      "checkpointing row: budget as a fraction of the no-checkpoint activation peak (0.3)");
  return c;
}

}  // namespace cli
}  // namespace mlo
