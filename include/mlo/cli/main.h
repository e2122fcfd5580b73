#pragma once
/// \file
/// The `mlo` command line as a library entry point (target `mlo::cli`), so a program that
/// registers its own experiments gets the whole tool: `run` (output folder, resolved config,
/// log, metrics.csv/jsonl, progress, resumable state, `--resume`, `--set`) and `plan`.
///
/// ```
/// #include <mlo/cli/main.h>
/// #include <mlo/run/experiment.h>
///
/// class MyExperiment : public mlo::run::Experiment { ... };
/// MLO_REGISTER_EXPERIMENT("mine", MyExperiment);
///
/// int main(int argc, char** argv) { return mlo::cli::main(argc, argv); }
/// ```
///
/// Then `./my_program run my.yaml --set engine.train_iters=100` with `experiment: mine` in
/// the YAML (see docs/getting-started.md, "Your own experiment from YAML").

namespace mlo {
namespace cli {

/// Parses `argv` as the `mlo` tool does and runs the command. Returns the process exit status:
/// 0 on success, 1 on a failure, 2 on a bad configuration or input (the message names the
/// file, line and key), 130 when interrupted (Ctrl-C; the state is saved for `--resume`).
int main(int argc, char** argv);

}  // namespace cli
}  // namespace mlo
