#pragma once
/// \file
/// The `mlo` command line as a library entry point (target `mlo::cli`), so a program that
/// registers its own experiments gets the same command line for them: `run` (output folder,
/// resolved config, log, metrics.csv/jsonl, progress, resumable state, `--resume`, `--set`,
/// `--seeds`), `compare`, `plot` and `experiments`.
///
/// ```
/// #include <mlo/cli/main.h>
/// #include <mlo/run/experiment.h>
///
/// class MyExperiment : public mlo::run::Experiment {
///  public:
///   static constexpr const char* kName = "mine";
///   ...
/// };
/// MLO_REGISTER_EXPERIMENT(MyExperiment);
///
/// int main(int argc, char** argv) { return mlo::cli::main(argc, argv); }
/// ```
///
/// Then `./my_program run my.yaml --set engine.train_iters=100` with `experiment: mine` in
/// the YAML (see docs/getting-started.md, "Your own experiment from YAML"). A program adds
/// subcommands of its own as `Command`s: the `mlo` tool adds `launch`, `plan` and `ablate`,
/// which live in the tool (tools/), not in this library.

#include <memory>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace mlo {
namespace cli {

/// A subcommand a program adds to the command line (CLI11's `CLI::App`).
class Command {
 public:
  virtual ~Command() = default;
  /// Adds the subcommand and its options to `app`; returns the subcommand. Parsing the command
  /// line then fills the command's own members.
  virtual CLI::App* add_to(CLI::App& app) = 0;
  /// Runs the subcommand once the command line chose it, inside `main`'s error handling (an
  /// `mlo::Error` becomes exit status 2); returns the exit status.
  virtual int run() = 0;
};

/// Parses `argv` as the `mlo` tool does, with the subcommands of `commands` besides the
/// library's, and runs the one chosen. Returns the process exit status: 0 on success, 1 on a
/// failure, 2 on a bad configuration or input (the message names the file, line and key), 130
/// when interrupted (Ctrl-C; the state is saved for `--resume`).
int main(int argc, char** argv, const std::vector<std::shared_ptr<Command>>& commands = {});

}  // namespace cli
}  // namespace mlo
