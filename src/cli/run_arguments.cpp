#include "run_arguments.h"

#include <CLI/CLI.hpp>

namespace mlo {
namespace cli {

CLI::App* add_run_command(CLI::App& app, RunArguments& args) {
  auto* run = app.add_subcommand("run", "Run an experiment described by a YAML file");
  run->add_option("config", args.config_path, "experiment YAML (see configs/)")->required();
  run->add_option("--set", args.overrides,
                  "override keys: --set engine.train_iters=100 seed=1 (repeatable)");
  add_device_option(*run, args.overrides);
  RunOptions& o = args.options;
  run->add_option_function<std::string>(
         "--out", [&o](const std::string& dir) { o.dir(dir); },
         "output folder (default runs/<name>)")
      ->check([](const std::string& dir) {
        return dir.empty() ? std::string("an empty folder name") : std::string();
      });
  run->add_flag_callback("--resume", [&o] { o.resume(true); },
                         "continue the run saved in the output folder");
  run->add_flag_callback("--overwrite", [&o] { o.overwrite(true); },
                         "start a new run in an output folder that holds one: its files are "
                         "moved into <out>/replaced-<time>/ first");
  run->add_flag_callback(
      "--no-progress", [&o] { o.progress(false); }, "no progress bar or progress lines (the log is unchanged)");
  run->add_option_function<int64_t>(
         "--stop-at", [&o](int64_t step) { o.stop_at(step); },
         "save the state and stop after this global step (continue with --resume)")
      ->check([](const std::string& text) {
        long long step = 0;
        size_t used = 0;
        try {
          step = std::stoll(text, &used);
        } catch (const std::exception&) {
        }
        return used == text.size() && step >= 1
                   ? std::string()
                   : "must be a global step >= 1 (the run stops after it), got '" + text + "'";
      });
  run->add_flag_callback("--log-all-ranks", [&o] { o.log_all_ranks(true); },
                         "under a launch, ranks other than 0 log at info too (else warnings "
                         "only)");
  run->add_option("--raise-at", args.raise_at,
                  "fault injection for tests: at the end of global step STEP raise SIGNAL (TERM, "
                  "INT, KILL, STOP) on this process (with RANK: on that rank of a launch only; "
                  "not in a launcher's restart), e.g. 7:TERM, 7:KILL:1");
  run->add_option("--seeds", args.seeds,
                  "run once per seed (0-4, 1,3,5) into <out>/seed_<s>, then summarize");
  return run;
}

void add_device_option(CLI::App& command, std::vector<std::string>& overrides) {
  command.add_option_function<std::string>(
      "--device",
      [&overrides](const std::string& device) { overrides.push_back("device=" + device); },
      "where to run: auto (a GPU when one is visible), cpu, cuda (under mlo launch: "
      "cuda:LOCAL_RANK) or cuda:N; the same as --set device=...");
}

}  // namespace cli
}  // namespace mlo
