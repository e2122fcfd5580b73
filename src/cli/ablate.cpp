#include "ablate.h"

#include "launch.h"
#include "run_arguments.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>
#include "ablation_report.h"
#include <mlo/run/yaml.h>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace mlo {
namespace cli {

run::AblationResult ablate_command(const std::string& config_path,
                                   const std::vector<std::string>& overrides,
                                   const AblateOptions& options) {
  std::string out_dir = options.out_dir;
  if (out_dir.empty())
    out_dir = "runs/" + run::load_run_config(config_path, overrides).name + "_ablation";
  // A row on several ranks: `mlo ablate-rank` per rank under `mlo launch`'s supervision (output
  // prefixed, a failed rank ends the others), each writing its figures into a JSON file.
  const std::string problem = options.ablation.problem();
  const run::RankRunner ranks = [&](const std::vector<std::string>& row_overrides, int64_t nproc,
                                    int64_t iterations) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(out_dir) / "ranks";
    fs::remove_all(dir);
    fs::create_directories(dir);
    LaunchOptions launch_options;
    launch_options.nproc = static_cast<int>(nproc);
    launch_options.program = options.program;
    launch_options.subcommand = "ablate-rank";
    launch_options.config = config_path;
    launch_options.run_args = {"--iterations", std::to_string(iterations), "--result",
                               dir.string()};
    if (!problem.empty())
      launch_options.run_args.insert(launch_options.run_args.end(), {"--problem", problem});
    for (const auto& o : row_overrides)
      launch_options.run_args.insert(launch_options.run_args.end(), {"--set", o});
    const int status = launch(launch_options);
    if (status == 128 + SIGINT || status == 128 + SIGTERM) {
      // Ctrl-C reached the ranks through the launcher: the user stops the ablation, not a row.
      std::cerr << "mlo ablate: interrupted" << std::endl;
      std::exit(status);
    }
    MLO_CHECK(status == 0, "its ranks failed (exit status ", status,
              "; their lines above say why)");
    std::vector<run::AblationRowResult> out;
    for (int64_t r = 0; r < nproc; ++r) {
      const fs::path file = dir / ("rank" + std::to_string(r) + ".json");
      std::ifstream in(file);
      MLO_CHECK(in.good(), "rank ", r, " wrote no ", file.string());
      std::ostringstream text;
      text << in.rdbuf();
      out.push_back(run::row_measurement_from_json(text.str()));
    }
    return out;
  };
  const auto result = run::run_ablation(
      config_path, overrides, options.ablation,
      [](const std::string& line) { std::cerr << "mlo ablate: " << line << std::endl; }, ranks);
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
      "ablate",
      "Memory ablation: peak, RSS, time and floor per memory feature (docs/memory-ablation.md)");
  auto* a = c->command;
  a->add_option("config", c->config_path, "experiment YAML (configs/ablation/)")->required();
  a->add_option("--set", c->overrides, "override a key for every row (repeatable)");
  add_device_option(*a, c->overrides);
  a->add_option("--out", c->options.out_dir, "output folder (default runs/<name>_ablation)");
  a->add_option("--rows", c->rows,
                "only these rows (baseline always): precision accumulation checkpointing "
                "activations finite_difference all data_parallel zero zero3");
  a->add_option_function<int64_t>(
      "--iterations", [o = &c->options](int64_t n) { o->ablation.iterations(n); },
      "meta-iterations per row measured for memory after one warm-up (default 1)");
  a->add_option_function<int64_t>(
      "--rounds", [o = &c->options](int64_t n) { o->ablation.rounds(n); },
      "timing rounds, each timing every row for --round-seconds (default 3; 0: the memory "
      "measurement's times)");
  a->add_option_function<double>(
      "--round-seconds", [o = &c->options](double s) { o->ablation.round_seconds(s); },
      "about how long each row is timed for in a round: whole meta-iterations at the row's "
      "measured pace, 1 to 1000 (default 1; 0: one meta-iteration per round)")
      ->check([](const std::string& text) {
        double s = -1;
        try {
          s = std::stod(text);
        } catch (const std::exception&) {
        }
        return s == 0 || (s >= 1 && s <= 1000) ? std::string()
                                               : "must be 0 or in [1, 1000], got " + text;
      });
  a->add_option_function<std::string>(
      "--problem", [o = &c->options](const std::string& p) { o->ablation.problem(p); },
      "the main problem (default: the experiment's default problem), whose model's features "
      "vary; naming it also narrows precision and accumulation to it (default: every level)");
  a->add_option_function<double>(
      "--budget", [o = &c->options](double b) { o->ablation.checkpoint_budget(b); },
      "checkpointing row: budget as a fraction of the no-checkpoint activation peak (0.3)");
  a->add_option_function<int64_t>(
      "--ranks", [o = &c->options](int64_t n) { o->ablation.ranks(n); },
      "processes of the data-parallel and ZeRO rows (default 2; 0 or 1 leaves them out)");
  return c;
}

bool AblateRankCommand::parsed() const { return command && command->parsed(); }

int AblateRankCommand::run() {
  const auto where = dist::Rendezvous::from_env();
  const auto row = run::measure_ablation_row(config_path, overrides, problem, iterations);
  const std::string file =
      (std::filesystem::path(result_dir) / ("rank" + std::to_string(where.rank) + ".json"))
          .string();
  write_file_atomically(file, [&](std::ostream& out) { out << run::row_measurement_json(row); });
  return 0;
}

std::unique_ptr<AblateRankCommand> add_ablate_rank_command(CLI::App& app) {
  auto c = std::make_unique<AblateRankCommand>();
  // An empty group hides it from --help: `mlo ablate` starts it, users do not.
  c->command = app.add_subcommand("ablate-rank", "one rank of a data-parallel ablation row");
  c->command->group("");
  auto* a = c->command;
  a->add_option("config", c->config_path, "experiment YAML")->required();
  a->add_option("--set", c->overrides, "override a key (repeatable)");
  a->add_option("--problem", c->problem, "the problem whose memory features vary");
  a->add_option("--iterations", c->iterations, "measured meta-iterations");
  a->add_option("--result", c->result_dir, "folder of the rank<r>.json files")->required();
  return c;
}

}  // namespace cli
}  // namespace mlo
