#pragma once
// Part of the command line (src/cli): the arguments of `mlo run`, described once. `mlo run` parses
// its command line with them, and `mlo launch` parses what it hands each rank's `mlo run` with
// the same description, so both read every argument (e.g. `--set a=1 b=2`) the same way.

#include "runner.h"

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mlo {
namespace cli {

/// What `mlo run CONFIG [options...]` was given.
struct RunArguments {
  /// The experiment YAML.
  std::string config_path;
  /// `--set key=value ...`: several values per `--set`, and `--set` repeatable.
  std::vector<std::string> overrides;
  /// `--out` (the folder; "" = runs/<name>), `--resume`, `--overwrite`, `--stop-at`,
  /// `--log-all-ranks`; `--no-progress` sets `progress`.
  RunOptions options;
  /// `--seeds 0-4` ("" = one run).
  std::string seeds;
  /// `--raise-at STEP:SIGNAL[:RANK]` ("" = none), read by `RaiseAt::parse` (fault.h).
  std::string raise_at;
};

/// Adds the `run` subcommand with its arguments to `app`; parsing fills `args`. Returns the
/// subcommand (`parsed()` says whether the command line chose it).
///
/// ```
/// CLI::App app;
/// mlo::cli::RunArguments args;
/// auto* run = mlo::cli::add_run_command(app, args);
/// app.parse(argc, argv);  // mlo run configs/x.yaml --set a=1 b=2 --out runs/x
/// ```
CLI::App* add_run_command(CLI::App& app, RunArguments& args);

/// Adds `--device D` to `command`: the same as `--set device=D` (auto | cpu | cuda | cuda:N),
/// appended to `overrides`. `mlo run`, `mlo ablate` and `mlo launch` have it.
void add_device_option(CLI::App& command, std::vector<std::string>& overrides);

}  // namespace cli
}  // namespace mlo
