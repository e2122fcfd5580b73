#pragma once
/// \file
/// `mlo::Run`: an engine's run as a folder, for any program in a line or two. The folder holds
/// what the run was (`config.yaml`, `results.json` with what produced it), what it did
/// (`log.txt`, `metrics.csv`, `metrics.jsonl`, TensorBoard files in `tb/`) and where it stands
/// (`state.pt`, saved every `save_step` global steps, at the end, and on Ctrl-C or SIGTERM), so
/// that `--resume` continues it bit for bit and `mlo plot` / `mlo compare` read it.
///
/// ```
/// int main(int argc, char** argv) {
///   return mlo::guard([&] {
///     ...                                         // problems, engine, engine.validation(...)
///     mlo::Run run(engine, mlo::RunOptions::from_command_line(argc, argv, "runs/quickstart"));
///     run.start();                                // PROGRAM [DIR] [--resume] [--overwrite]
///   });
/// }
/// ```
///
/// A run folder is history. A run never writes into a folder that holds another run's files
/// unless told to: `resume` continues the run saved there, `overwrite` first moves its files
/// into `DIR/replaced-<time>/`; otherwise starting is an error that says so, and nothing is
/// written. A lock (`DIR/.mlo.lock`, held while the run lives, naming its process and host)
/// keeps a second writer out, and a file the run did not make (a `config.yaml` of the user's)
/// is never written over. `mlo run` runs its experiments through this same class.
///
/// Under a launcher that restarts its workers after a failure (torchrun `--max-restarts`, `mlo
/// launch --max-restarts`: `TORCHELASTIC_RESTART_COUNT` or `MLO_RESTART_COUNT` above 0), a run
/// whose folder (the one the first attempt claimed: its lock names the same launcher process)
/// holds a saved state resumes from it unasked, and its log says so; with none saved it starts
/// over, the failed attempt's files moved aside. While `start()` waits for the other ranks of a
/// launch, SIGINT and SIGTERM end the wait (`mlo::Interrupted`).

#include <mlo/base/fields.h>
#include <mlo/core/metrics.h>

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlo {

class Engine;

/// Where and how a run writes its folder. Example:
/// `RunOptions("runs/nas").save_step(100).resume(true)`.
struct RunOptions {
  /// A run in folder `dir` (created when missing).
  explicit RunOptions(std::string dir = "") : dir_(std::move(dir)) {}
  /// The run's folder.
  TORCH_ARG(std::string, dir);
  /// Continue the run saved in `dir` (its state, metrics and log) instead of starting one.
  TORCH_ARG(bool, resume) = false;
  /// Start a new run in `dir` although it holds another: that run's files are moved into
  /// `dir/replaced-<UTC time>/` first (nothing is deleted).
  TORCH_ARG(bool, overwrite) = false;
  /// Resumable state every `save_step` global steps, and at the end (0: at the end only; >= 0).
  TORCH_ARG(int64_t, save_step) = 500;
  /// TensorBoard event files in `dir/tb/` besides `metrics.csv` and `metrics.jsonl`.
  TORCH_ARG(bool, tensorboard) = true;
  /// Save the state and stop after this global step, as Ctrl-C does (0: run to the end).
  TORCH_ARG(int64_t, stop_at) = 0;
  /// Progress on standard error: true, a bar redrawn in place; false, none (the log file and
  /// the console's log lines are unchanged); nullopt, the bar when standard error is a
  /// terminal, else a plain progress line every `log_step` global steps.
  TORCH_ARG(std::optional<bool>, progress) = std::nullopt;
  /// Under a launch, ranks other than 0 log at info too (else warnings and errors only).
  TORCH_ARG(bool, log_all_ranks) = false;
  /// The command line that started the run, recorded in `results.json` ("meta").
  TORCH_ARG(std::vector<std::string>, command_line);

 public:
  /// Describes the keys YAML sets (`engine.save_step`, `engine.tensorboard`), with checks.
  void visit(Fields& fields);
  /// What a program's own command line asks for: `PROGRAM [DIR] [--resume] [--overwrite]
  /// [--stop-at STEP] [--no-progress]`, the folder defaulting to `default_dir`; the command
  /// line is recorded. Without `rest`, an option it does not know is an `mlo::Error` naming it.
  /// A program with options of its own passes `rest`: every option this does not know (`-x`,
  /// `--name=value`) and every argument after a lone `--` is appended there, in order, for the
  /// program to read. A value goes with its option (`--lr=0.5`) or after `--`: a word right
  /// after an option this does not know is an error, since it could be the output folder.
  ///
  /// ```
  /// std::vector<std::string> mine;   // PROGRAM [DIR] [--resume] ... --lr=0.5
  /// auto options = mlo::RunOptions::from_command_line(argc, argv, "runs/mine", &mine);
  /// ```
  static RunOptions from_command_line(int argc, const char* const* argv,
                                      std::string default_dir,
                                      std::vector<std::string>* rest = nullptr);
};

/// How a run ended (`Run::start`).
struct RunResult {
  /// The final evaluation's metrics (`Run::final_evaluation`; empty when interrupted or
  /// without one).
  Metrics final;
  /// The final validation metrics, of the parameters the final evaluation sees (empty when
  /// interrupted or without a validation hook).
  Metrics valid;
  int64_t steps = 0;         ///< global steps done
  bool interrupted = false;  ///< stopped by Ctrl-C, SIGTERM or `stop_at` (state saved)
  /// The global step whose parameters the final metrics are of: the best validation's under
  /// `EarlyStopping::restore_best`, else `steps`.
  int64_t evaluated_step = 0;
  /// Resumed a run that had finished: nothing ran, nothing was written (the numbers are those
  /// of its `results.json`).
  bool already_finished = false;
  std::string dir;  ///< the run's folder
};

/// An engine's run as a folder (see the file comment). Under a distributed strategy every rank
/// makes one; rank 0 writes the folder (config, log, metrics, results), validates and evaluates,
/// and the state is saved by rank 0 (default, distributed) or by every rank into its own file
/// (zero1/2/3, which shard it).
///
/// A run is a set of engine callbacks (core/callback.h), added for the duration of `start` after
/// the program's own: the metrics files and TensorBoard's (rank 0), the progress (rank 0), the
/// stops on request (SIGINT, SIGTERM, `stop_at`) and the checkpoints; the folder's claim and
/// lock, the log file and the config record live as long as `start`. A program's own logger or
/// stop rule is one more callback, added to the engine before `start`.
class Run {
 public:
  /// A run of `engine` (whose problems, edges and validation hook are set) in `options.dir`.
  /// Nothing is written before `start`.
  Run(Engine& engine, RunOptions options);
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  /// The configuration recorded as `config.yaml`; by default the engine's own: its config, every
  /// problem's and the graph, as YAML (`engine_yaml`). A resumed run keeps the record it has and,
  /// where `same(saved)` says the saved one means something else (default: another text),
  /// warns and records the configuration it goes on with in `config.resumed.yaml`.
  Run& config(std::string yaml, std::function<bool(const std::string& saved)> same = {});
  /// What the run is called in its results ("experiment"): by default the program's name.
  /// A name given here is saved with the state, and a resume refuses a state saved under
  /// another name.
  Run& name(std::string name);
  /// The seed the program drew its initialization and data from, recorded with the results
  /// and saved with the state: a resume refuses a state saved with another seed.
  Run& seed(int64_t seed);
  /// Runs once training is over, after the best validation's parameters are back (with
  /// `restore_best`): the test set's metrics, say. They go to the metrics files (source
  /// "test"), `results.json` ("test") and the log (`headline` first).
  Run& final_evaluation(std::function<Metrics()> hook, std::vector<std::string> headline = {});
  /// Why the run has no validation ("data.valid_size is 0"), for a program whose engine has no
  /// validation hook by design: the log ends with "final validation: none (<why>)".
  Run& without_validation(std::string why);
  /// Lines about the run (data, models) logged when it starts.
  Run& describe(std::string text);
  /// Marks the run's data synthetic: the log warns and `results.json` says so.
  Run& synthetic(bool synthetic = true);
  /// Runs the engine to `train_iters` (or early stopping, Ctrl-C, SIGTERM, `stop_at`), writing
  /// the folder as it goes. Throws `mlo::Error` for a folder it may not use (another run there,
  /// locked by another process, nothing to resume) before it writes anything.
  RunResult start();

  /// The refusals `start` would make for `options.dir` (another run there and neither resume
  /// nor overwrite asked for, nothing to resume, in use by a live run), thrown as the same
  /// `mlo::Error` without writing anything; for a program that prepares for long (loads data,
  /// trains a baseline) before it can make its `Run`. Checks in rank 0 of a launch only (the
  /// rank that claims the folder; RANK unset counts as 0).
  static void check(const RunOptions& options);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The engine's configuration as YAML: `engine:` (its `EngineConfig`), `problems:` (each
/// problem's `ProblemConfig`, in the order they were added) and `dependencies:` (the `u2l` and
/// `l2u` edges by name); what a program's run records as its `config.yaml`.
std::string engine_yaml(const Engine& engine);

/// Runs `body` and turns what it throws into an exit status and an error line of the default
/// spdlog logger (standard error unless the program set another): 0 when it returns; 130 when it
/// returns after a `Run` in it stopped on Ctrl-C or SIGTERM (state saved; not at `stop_at`), or
/// on `mlo::Interrupted` (a signal while waiting for the other ranks), as a shell expects of an
/// interrupted job; 2 for an `mlo::Error` (a bad setting or input: "[...] [error] <message>");
/// 1 for any other exception ("failed: <message>"). Under torchrun the message also goes to its
/// error file (`dist/error_file.h`). The `main` of a program: `return mlo::guard([&] { ... });`.
int guard(const std::function<void()>& body);

}  // namespace mlo
