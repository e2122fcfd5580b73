// The `mlo` command-line tool: `mlo run CONFIG [--set key=value]... [--out DIR] [--resume]`.
#include "runner.h"

#include <mlo/core/error.h>
#include <mlo/io/yaml.h>

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"mlo: multilevel optimization on LibTorch"};
  app.require_subcommand(1);

  auto* run = app.add_subcommand("run", "Run an experiment described by a YAML file");
  std::string config_path;
  std::vector<std::string> overrides;
  mlo::cli::RunOptions options;
  bool no_progress = false;
  run->add_option("config", config_path, "experiment YAML (see configs/)")->required();
  run->add_option("--set", overrides, "override a key: --set engine.train_iters=100 (repeatable)");
  run->add_option("--out", options.out_dir, "output folder (default runs/<name>)");
  run->add_flag("--resume", options.resume, "continue from <out>/state.pt");
  run->add_flag("--no-progress", no_progress, "plain progress lines even on a terminal");
  run->add_option("--stop-at", options.stop_at,
                  "save the state and stop after this global step (continue with --resume)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (run->parsed()) {
      if (no_progress) options.progress = false;
      const auto config = mlo::io::load_run_config(config_path, overrides);
      const auto result = mlo::cli::run_experiment(config, options);
      return result.interrupted && options.stop_at != result.steps ? 130 : 0;
    }
  } catch (const mlo::Error& e) {
    std::cerr << "mlo: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlo: failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
