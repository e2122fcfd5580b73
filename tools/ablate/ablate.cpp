#include "ablate.h"

#include "launch/launch.h"
#include "cli/run_arguments.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>
#include "ablation_report.h"
#include <mlo/run/yaml.h>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

namespace mlo {
namespace cli {

namespace {

namespace fs = std::filesystem;

// The files an ablation writes into its folder (besides replaced-<time>/).
const char* const kAblationFiles[] = {"ablation.md",  "ablation.csv", "ablation.json",
                                      "ablation.png", "ablation.gp",  "ablation.dat",
                                      "rows",         "ranks"};

std::vector<std::string> ablation_files(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code error;
  for (const char* name : kAblationFiles) {
    if (fs::exists(dir / name, error)) found.push_back(name);
  }
  return found;
}

// The folder as the options ask: a new one; one that holds an earlier ablation only with
// --resume (continued) or --overwrite (its files moved into replaced-<time>/ first).
void claim_folder(const fs::path& dir, const AblateOptions& options) {
  MLO_CHECK(!(options.resume && options.overwrite), "mlo ablate: '", dir.string(),
            "': --resume continues the ablation there and --overwrite replaces it; ask for one "
            "of them");
  std::error_code error;
  MLO_CHECK(!fs::exists(dir, error) || fs::is_directory(dir, error), "mlo ablate: --out '",
            dir.string(), "' is a file, not a folder");
  const auto found = ablation_files(dir);
  std::string names;
  for (const auto& name : found) names += (names.empty() ? "" : ", ") + name;
  if (found.empty() || options.resume) return;
  MLO_CHECK(options.overwrite, "mlo ablate: '", dir.string(), "' holds an ablation (", names,
            "); continue it with --resume (finished rows are kept), replace it with --overwrite "
            "(its files are moved into ", dir.string(), "/replaced-<time>/), or choose another "
            "--out");
  const std::string aside = move_into_replaced(dir.string(), found);
  std::cerr << "mlo ablate: the earlier ablation's files moved to " << aside << "\n";
}

// A finished row's file: the row, what it ran with, and its measurement.
std::string row_file_json(const std::string& config_path, const std::vector<std::string>& all,
                          int64_t iterations, const run::AblationRowResult& row) {
  nlohmann::json j;
  j["row"] = row.row.key;
  j["config"] = config_path;
  j["overrides"] = all;
  j["iterations"] = iterations;
  j["measurement"] = nlohmann::json::parse(run::row_measurement_json(row));
  return j.dump() + "\n";
}

// The logger of the command: stderr (stdout carries only the table).
class StderrLogging {
 public:
  StderrLogging() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "mlo-ablate", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    logger->set_level(previous_->level());
    spdlog::set_default_logger(logger);
  }
  ~StderrLogging() { spdlog::set_default_logger(previous_); }
  StderrLogging(const StderrLogging&) = delete;
  StderrLogging& operator=(const StderrLogging&) = delete;

 private:
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace

run::AblationResult ablate_command(const std::string& config_path,
                                   const std::vector<std::string>& overrides,
                                   const AblateOptions& options) {
  const StderrLogging logging;
  std::string out_dir = options.out_dir;
  if (out_dir.empty())
    out_dir = "runs/" + run::load_run_config(config_path, overrides).name + "_ablation";
  claim_folder(out_dir, options);
  // A row on several ranks: `mlo ablate-rank` per rank under `mlo launch`'s supervision (output
  // prefixed, a failed rank ends the others), each writing its figures into a JSON file.
  const std::string problem = options.ablation.problem();
  const run::RankRunner ranks = [&](const std::vector<std::string>& row_overrides, int64_t nproc,
                                    int64_t iterations) {
    const fs::path dir = fs::path(out_dir) / "ranks";
    std::error_code ignored;
    for (int64_t r = 0; r < nproc; ++r) fs::remove(dir / ("rank" + std::to_string(r) + ".json"), ignored);
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
      std::cerr << "mlo ablate: interrupted; the finished rows are in " << out_dir
                << " (continue with --resume)" << std::endl;
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
  // Each finished row is written at once (rows/<key>.json, and the report so far), so that an
  // interrupted ablation keeps what it measured and --resume measures only the rest.
  const fs::path rows_dir = fs::path(out_dir) / "rows";
  std::map<std::string, std::pair<std::vector<std::string>, int64_t>> ran_with;
  run::AblationHooks hooks;
  hooks.finished = [&](const run::AblationRow& row, const std::vector<std::string>& all,
                       int64_t iterations) -> std::optional<run::AblationRowResult> {
    ran_with[row.key] = {all, iterations};
    if (!options.resume) return std::nullopt;
    const fs::path file = rows_dir / (row.key + ".json");
    std::ifstream in(file);
    if (!in.good()) return std::nullopt;
    try {
      const auto j = nlohmann::json::parse(in);
      if (j.at("config").get<std::string>() != config_path ||
          j.at("overrides").get<std::vector<std::string>>() != all ||
          j.at("iterations").get<int64_t>() != iterations) {
        std::cerr << "mlo ablate: " << file.string() << " was measured with other settings; "
                  << "the row is measured again\n";
        return std::nullopt;
      }
      return run::row_measurement_from_json(j.at("measurement").dump());
    } catch (const std::exception& e) {
      std::cerr << "mlo ablate: " << file.string() << " cannot be read (" << e.what()
                << "); the row is measured again\n";
      return std::nullopt;
    }
  };
  hooks.row_done = [&](const run::AblationRowResult& row, const run::AblationResult& so_far) {
    std::error_code error;
    fs::create_directories(rows_dir, error);
    MLO_CHECK(!error, "mlo ablate: cannot create '", rows_dir.string(), "': ", error.message());
    const auto found = ran_with.find(row.row.key);
    if (found != ran_with.end()) {
      write_file_atomically((rows_dir / (row.row.key + ".json")).string(), [&](std::ostream& out) {
        out << row_file_json(config_path, found->second.first, found->second.second, row);
      });
    }
    run::write_ablation_tables(out_dir, so_far);
  };
  const auto result = run::run_ablation(
      config_path, overrides, options.ablation,
      [](const std::string& line) { std::cerr << "mlo ablate: " << line << std::endl; }, ranks,
      hooks);
  std::cout << run::ablation_markdown(result) << std::flush;
  const auto files = run::write_ablation(out_dir, result);
  std::cerr << "mlo ablate: wrote " << files.markdown << ", " << files.csv << ", " << files.json;
  if (files.chart_error.empty()) {
    std::cerr << ", " << files.png << "\n";
  } else {
    std::cerr << "\nmlo ablate: no chart: " << files.chart_error << "\n";
  }
  return result;
}

int AblateCommand::run() {
  options.ablation.rows(rows);
  if (quick) {
    // A few minutes on 2 CPU cores: what it leaves out is said, so that nobody takes it for
    // the full table.
    std::string preset;
    const auto unless_given = [&](const char* flag, const std::function<void()>& set,
                                  const std::string& what) {
      if (command->count(flag) > 0) return;
      set();
      preset += (preset.empty() ? "" : ", ") + what;
    };
    unless_given("--iterations", [&] { options.ablation.iterations(1); },
                 "one measured meta-iteration per row");
    unless_given("--rounds", [&] { options.ablation.rounds(1); }, "one timing round");
    unless_given("--round-seconds", [&] { options.ablation.round_seconds(0); },
                 "each row timed for one meta-iteration (times are rough)");
    unless_given("--batch", [&] { options.ablation.batch(8); }, "batch 8");
    unless_given("--ranks", [&] { options.ablation.ranks(0); },
                 "the rows of several ranks left out (data_parallel, zero, zero3)");
    std::cerr << "mlo ablate: --quick: " << preset
              << "; without --quick the full ablation (docs/memory-ablation.md)" << std::endl;
  }
  ablate_command(config_path, overrides, options);
  return 0;
}

CLI::App* AblateCommand::add_to(CLI::App& app) {
  AblateCommand* c = this;
  c->command = app.add_subcommand(
      "ablate",
      "Memory ablation: peak, RSS, time and floor per memory feature (docs/memory-ablation.md)");
  auto* a = c->command;
  a->add_option("config", c->config_path, "experiment YAML (configs/ablation/)")->required();
  a->add_option("--set", c->overrides, "override a key for every row (repeatable)");
  add_device_option(*a, c->overrides);
  a->add_option("--out", c->options.out_dir, "output folder (default runs/<name>_ablation)");
  a->add_flag("--resume", c->options.resume,
              "continue the ablation in the output folder: finished rows are kept");
  a->add_flag("--overwrite", c->options.overwrite,
              "replace the ablation in the output folder (its files are moved into "
              "<out>/replaced-<time>/ first)");
  a->add_flag("--quick", c->quick,
              "a few minutes on 2 CPU cores: batch 8, one measured meta-iteration, one timing "
              "round of one meta-iteration, no rows of several ranks (flags given win)");
  a->add_option_function<int64_t>(
      "--batch", [o = &c->options](int64_t n) { o->ablation.batch(n); },
      "the main problem's batch (through the experiment's batch-size key; default: as "
      "configured)")
      ->check([](const std::string& text) {
        long long batch = 0;
        size_t used = 0;
        try {
          batch = std::stoll(text, &used);
        } catch (const std::exception&) {
        }
        return used == text.size() && batch >= 1 ? std::string()
                                                  : "must be a batch size >= 1, got '" + text + "'";
      });
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
  return c->command;
}

int AblateRankCommand::run() {
  const auto where = dist::Rendezvous::from_env();
  const auto row = run::measure_ablation_row(config_path, overrides, problem, iterations);
  const std::string file =
      (std::filesystem::path(result_dir) / ("rank" + std::to_string(where.rank) + ".json"))
          .string();
  write_file_atomically(file, [&](std::ostream& out) { out << run::row_measurement_json(row); });
  return 0;
}

CLI::App* AblateRankCommand::add_to(CLI::App& app) {
  AblateRankCommand* c = this;
  // An empty group hides it from --help: `mlo ablate` starts it, users do not.
  c->command = app.add_subcommand("ablate-rank", "one rank of a data-parallel ablation row");
  c->command->group("");
  auto* a = c->command;
  a->add_option("config", c->config_path, "experiment YAML")->required();
  a->add_option("--set", c->overrides, "override a key (repeatable)");
  a->add_option("--problem", c->problem, "the problem whose memory features vary");
  a->add_option("--iterations", c->iterations, "measured meta-iterations");
  a->add_option("--result", c->result_dir, "folder of the rank<r>.json files")->required();
  return c->command;
}

}  // namespace cli
}  // namespace mlo
