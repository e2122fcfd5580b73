// The `mlo` command line, as a library entry point (mlo/cli/main.h):
//   mlo run CONFIG [--set key=value]... [--out DIR] [--resume] [--stop-at STEP] [--seeds 0-4]
//           [--raise-at STEP:SIGNAL[:RANK]]
//   mlo compare RUN_A RUN_B [--metric M]... [--plot FILE.png]
//   mlo plot RUN [RUN...] [--metric M]... [--out FILE.png] [--band minmax|std]
//   mlo experiments
// plus the program's own commands (the mlo tool's launch, plan, ablate: tools/).
#include <mlo/cli/main.h>

#include "compare.h"
#include "plot.h"
#include "run_arguments.h"
#include "runner.h"
#include "seed_stats.h"
#include "seeds.h"

#include <mlo/base/error.h>
#include <mlo/base/standard_streams.h>
#include <mlo/base/stop_request.h>
#include <mlo/dist/error_file.h>
#include <mlo/dist/process_group.h>
#include <mlo/run/yaml.h>
#include <mlo/run/experiment.h>

#include <CLI/CLI.hpp>

#include <iostream>

namespace mlo {
namespace cli {

int main(int argc, char** argv, const std::vector<std::shared_ptr<Command>>& commands) {
  guard_standard_streams();  // (before any file is opened)
  CLI::App app{"mlo: multilevel optimization on LibTorch"};
  app.require_subcommand(1);

  RunArguments run_args;
  auto* run_cmd = add_run_command(app, run_args);
  RunOptions& options = run_args.options;

  auto* experiments =
      app.add_subcommand("experiments", "List the experiments this program can run");
  CompareCommand compare(app);
  PlotCommand plot_command(app);
  std::vector<std::pair<CLI::App*, Command*>> added;
  for (const auto& command : commands) added.emplace_back(command->add_to(app), command.get());

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end with 0; a bad command line, like every bad input, with 2
    // (CLI11's own codes, 105 and up, would read as crashes to a shell script).
    if (e.get_exit_code() == 0) return app.exit(e);
    const std::string first = argc > 1 ? argv[1] : "";
    std::string names;
    bool known = false;
    for (const auto* command : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + command->get_name();
      known = known || command->get_name() == first;
    }
    std::string line;
    if (!known && !first.empty() && first[0] != '-') {
      line = "mlo: error: unknown command '" + first + "'; the commands are " + names +
             " (mlo --help)";
    } else {
      line = std::string("mlo: error: ") + e.what() + " (mlo --help, or mlo COMMAND --help)";
    }
    std::cerr << line << "\n";
    dist::write_error_file(line);
    return 2;
  }
  options.command_line(std::vector<std::string>(argv, argv + argc));
  try {
    if (run_cmd->parsed()) {
      const auto config = run::load_run_config(run_args.config_path, run_args.overrides);
      const std::string& seeds = run_args.seeds;
      const RaiseAt raise_at =
          run_args.raise_at.empty() ? RaiseAt() : RaiseAt::parse(run_args.raise_at);
      if (!seeds.empty()) {
        const auto where = dist::Rendezvous::from_env();
        MLO_CHECK(where.world_size == 1 || where.from_scheduler,
                  "--seeds runs one process only; under mlo launch (WORLD_SIZE > 1) launch once "
                  "per seed with --set seed=S --out DIR/seed_S");
        bool interrupted = false;
        run_seeds(config, options, parse_seeds(seeds), &interrupted, raise_at);
        return interrupted ? 130 : 0;
      }
      const auto result = run_experiment(config, options, raise_at);
      // (a --stop-at inside an accumulation window stops at the window's end, a little later)
      const bool stopped_as_asked = options.stop_at() > 0 && result.steps >= options.stop_at();
      return result.interrupted && !stopped_as_asked ? 130 : 0;
    }
    if (compare.parsed()) return compare.run();
    if (plot_command.parsed()) return plot_command.run();
    if (experiments->parsed()) {
      for (const auto& name : run::experiment_names()) std::cout << name << "\n";
      return 0;
    }
    for (const auto& [subcommand, command] : added) {
      if (subcommand->parsed()) return command->run();
    }
  } catch (const Interrupted& e) {
    std::cerr << "mlo: interrupted: " << e.what() << "\n";
    dist::write_error_file(std::string("mlo: interrupted: ") + e.what());
    return 130;
  } catch (const Error& e) {
    std::cerr << "mlo: error: " << e.what() << "\n";
    dist::write_error_file(std::string("mlo: error: ") + e.what());
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlo: failed: " << e.what() << "\n";
    dist::write_error_file(std::string("mlo: failed: ") + e.what());
    return 1;
  }
  return 0;
}

}  // namespace cli
}  // namespace mlo
