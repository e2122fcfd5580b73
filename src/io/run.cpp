// mlo::Run: a run's lifecycle as a composition. The folder's claim (run_folder.h), the state
// (checkpoints.h), the log (log_file.h), the config record and results (run_record.h) and the
// engine callbacks that write metrics (metrics_files.h, tensorboard_files.h), show progress
// (progress.h) and stop on request (stop_requests.h).
#include <mlo/io/run.h>

#include "checkpoints.h"
#include "log_file.h"
#include "metrics_files.h"
#include "progress.h"
#include "restart.h"
#include "run_folder.h"
#include "run_metadata.h"
#include "run_record.h"
#include "stop_requests.h"
#include "tensorboard_files.h"

#include <mlo/base/device.h>
#include <mlo/base/error.h>
#include <mlo/base/standard_streams.h>
#include <mlo/base/stop_request.h>
#include <mlo/core/engine.h>
#include <mlo/dist/error_file.h>
#include <mlo/dist/process_group.h>

#include <spdlog/spdlog.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <filesystem>

namespace mlo {
namespace {

namespace fs = std::filesystem;

// Set when a run stopped on a signal (its own, or another rank's) rather than at its end or
// at stop_at; `guard` turns it into exit status 130, as a shell expects of an interrupted job.
std::atomic<bool> g_stopped_on_signal{false};

// `text` as a Markdown code block (every line indented by four spaces).
std::string markdown_code(const std::string& text) {
  std::string out = "    ";
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += "    ";
  }
  return out;
}

std::string program_name(const std::vector<std::string>& command_line) {
  if (command_line.empty() || command_line.front().empty()) return "run";
  return fs::path(command_line.front()).filename().string();
}

// The callbacks a run adds to its engine, removed again when it ends (also on an error).
class Attached {
 public:
  Attached(Engine& engine, std::vector<std::shared_ptr<Callback>> callbacks)
      : engine_(engine), callbacks_(std::move(callbacks)) {
    for (const auto& callback : callbacks_) engine_.add_callback(callback);
  }
  ~Attached() {
    for (const auto& callback : callbacks_) engine_.remove_callback(*callback);
  }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;

 private:
  Engine& engine_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
};

// Who this process is in the run: its rank (0 under strategy default), and a launcher's
// restart of the workers after a failure ("" when none).
struct Place {
  int rank = 0;
  bool main = true;
  int world_size = 1;
  std::string restart;
};

Place place_of(const EngineConfig& config, RunOptions& options) {
  const dist::Rendezvous where = dist::Rendezvous::from_env();
  MLO_CHECK(config.strategy() != dist::Strategy::kDefault || where.world_size == 1 ||
                where.from_scheduler,
            "WORLD_SIZE=", where.world_size, " but the engine's strategy is default; set ",
            "engine.strategy to distributed, zero1, zero2 or zero3 (e.g. --set ",
            "engine.strategy=distributed), or run one process");
  Place place;
  const bool one = config.strategy() == dist::Strategy::kDefault;
  place.rank = one ? 0 : where.rank;
  place.main = place.rank == 0;
  place.world_size = one ? 1 : where.world_size;
  // A launcher's restart of its workers after a failure (torchrun --max-restarts, mlo launch
  // --max-restarts) continues from the run's last saved state, unasked; with none saved yet it
  // starts over as the first attempt did.
  if (where.restart_count > 0) {
    place.restart = "restart " + std::to_string(where.restart_count) + " by " + where.launcher;
    options = io::restarted(where, options);
  }
  return place;
}

// The result of a resumed run that has finished (its results written at train_iters, or when it
// stopped early): nothing runs, nothing is written. Every rank reads the same folder's results.
std::optional<RunResult> finished_run(const RunOptions& options, int64_t train_iters, bool main) {
  auto finished = io::finished_results(options.dir(), train_iters);
  if (!finished) return std::nullopt;
  RunResult result;
  result.dir = options.dir();
  result.already_finished = true;
  result.steps = finished->steps;
  result.evaluated_step = finished->evaluated_step;
  result.final = std::move(finished->test);
  result.valid = std::move(finished->valid);
  if (main) {
    spdlog::warn("the run in {} has finished (results.json, global step {}); nothing to resume "
                 "(to train on, resume with more global steps: EngineConfig::train_iters, or "
                 "engine.train_iters in a YAML configuration)",
                 options.dir(), result.steps);
  }
  return result;
}

void check_options(const RunOptions& options) {
  RunOptions copy = options;
  const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
  MLO_CHECK(failed.empty(), "run: ", failed);
  MLO_CHECK(options.stop_at() >= 0, "run: stop_at must be >= 0 (0: run to the end), got ",
            options.stop_at());
  MLO_CHECK(!(options.resume() && options.overwrite()), "'", options.dir(),
            "': resume continues the run there and overwrite replaces it; ask for one of them");
}

}  // namespace

struct Run::State {
  State(Engine& e, RunOptions o) : engine(e), options(std::move(o)) {}
  Engine& engine;
  RunOptions options;
  std::optional<std::string> config;
  std::function<bool(const std::string&)> same_config;
  std::string name;
  bool named = false;  // (the program's file name otherwise: not the run's identity)
  std::optional<int64_t> seed;
  std::function<Metrics()> final_hook;
  std::vector<std::string> final_headline;
  std::string description;
  std::optional<std::string> no_validation;
  bool synthetic = false;

  // The run's start: what is logged and recorded once the state is loaded.
  io::RunMetadata start_record(const Place& place, int64_t start, const std::string& loaded,
                               const std::string& resolved);
  // Rank 0's metrics sinks (metrics files, TensorBoard's), with the run's texts written.
  std::vector<std::shared_ptr<io::Recorder>> recorders(int64_t start, const std::string& resolved,
                                                       const io::RunMetadata& meta);
  // The end of a run that trained to its end: the final validation and evaluation, results.json.
  void finish(RunResult& result, const Place& place, io::RunMetadata meta,
              const std::vector<std::shared_ptr<io::Recorder>>& recorders);
};

Run::Run(Engine& engine, RunOptions options)
    : state_(std::make_unique<State>(engine, std::move(options))) {
  state_->name = program_name(state_->options.command_line());
}

Run::~Run() = default;

void Run::check(const RunOptions& options) {
  const auto where = dist::Rendezvous::from_env();
  if (where.rank != 0) return;
  const RunOptions used = io::restarted(where, options);
  io::RunFolder::check(used.dir(), used.resume(), used.overwrite());
}

Run& Run::config(std::string yaml, std::function<bool(const std::string&)> same) {
  state_->config = std::move(yaml);
  state_->same_config = std::move(same);
  return *this;
}
Run& Run::name(std::string name) {
  state_->name = std::move(name);
  state_->named = true;
  return *this;
}
Run& Run::seed(int64_t seed) {
  state_->seed = seed;
  return *this;
}
Run& Run::final_evaluation(std::function<Metrics()> hook, std::vector<std::string> headline) {
  state_->final_hook = std::move(hook);
  state_->final_headline = std::move(headline);
  return *this;
}
Run& Run::without_validation(std::string why) {
  state_->no_validation = std::move(why);
  return *this;
}
Run& Run::describe(std::string text) {
  state_->description = std::move(text);
  return *this;
}
Run& Run::synthetic(bool synthetic) {
  state_->synthetic = synthetic;
  return *this;
}

RunResult Run::start() {
  guard_standard_streams();
  State& s = *state_;
  Engine& engine = s.engine;
  check_options(s.options);
  const Place place = place_of(engine.config(), s.options);
  const RunOptions& options = s.options;
  if (options.resume()) {
    if (auto finished = finished_run(options, engine.config().train_iters(), place.main)) {
      return *finished;
    }
  }
  // Rank 0 claims the folder (lock, and the checks of what it holds) before anything is
  // written; under zero the other ranks write their own state files into it.
  const std::string resolved = s.config ? *s.config : engine_yaml(engine);
  io::StateIdentity identity;
  identity.run = s.named ? s.name : std::string();
  identity.seed = s.seed;
  identity.config = resolved;
  auto checkpoints = std::make_shared<io::Checkpoints>(
      options.dir(), engine.config().strategy(), place.rank, options.save_step(), identity);
  std::optional<io::RunFolder> folder;
  if (place.main) folder.emplace(options.dir(), options.resume(), options.overwrite());
  if (!place.main && checkpoints->saves()) {
    std::error_code error;
    fs::create_directories(options.dir(), error);
  }
  // NOTE: from here on, before the state is loaded (which joins the process group): a signal
  // ends the wait for the other ranks at once.
  auto stops = std::make_shared<io::StopRequests>(options.stop_at());
  // NOTE: before the log is opened and the configuration recorded: a state that cannot be
  // resumed (damaged, or saved by another configuration) is refused with nothing written.
  std::string loaded;
  const int64_t start = options.resume() ? checkpoints->load(engine, &loaded) : 0;
  const bool progress = place.main && options.progress().value_or(true);
  const bool terminal =
      progress && options.progress().value_or(io::Progress::stderr_is_terminal());
  io::LogFile log((fs::path(options.dir()) / "log.txt").string(), place.main, place.rank,
                  terminal, options.log_all_ranks());
  if (folder && !folder->replaced().empty()) {
    spdlog::info("the files of an earlier run in {} moved to {}", options.dir(),
                 folder->replaced());
  }
  const io::RunMetadata meta = s.start_record(place, start, loaded, resolved);
  // The engine callbacks of the run, after the program's own: rank 0's records and progress,
  // then the stops on request and the checkpoints (which see every callback's decision).
  const auto recorders = place.main ? s.recorders(start, resolved, meta)
                                    : std::vector<std::shared_ptr<io::Recorder>>{};
  std::vector<std::shared_ptr<Callback>> callbacks(recorders.begin(), recorders.end());
  if (progress) callbacks.push_back(std::make_shared<io::Progress>(terminal));
  callbacks.push_back(stops);
  callbacks.push_back(checkpoints);
  {
    const Attached attached(engine, callbacks);
    engine.run();
  }
  RunResult result;
  result.dir = options.dir();
  result.steps = engine.global_step();
  // NOTE: under a launch another rank's callback may have paused the run (its Ctrl-C came
  // first): every rank stopped at the same step, short of train_iters and not finished.
  result.interrupted = stops->stopped() || (result.steps < engine.config().train_iters() &&
                                            !engine.stopped_early());
  if (result.interrupted) {
    // (a stop_at inside an accumulation window stops at the window's end, a little later)
    if (!(options.stop_at() > 0 && result.steps >= options.stop_at())) g_stopped_on_signal = true;
    if (place.main || checkpoints->saves()) {
      spdlog::warn("{} at global step {}; state saved to {}; continue with --resume",
                   io::StopRequests::signalled() ? "interrupted" : "stopped", result.steps,
                   checkpoints->path());
    }
    return result;
  }
  s.finish(result, place, meta, recorders);
  return result;
}

std::vector<std::shared_ptr<io::Recorder>> Run::State::recorders(int64_t start,
                                                                 const std::string& resolved,
                                                                 const io::RunMetadata& meta) {
  const int64_t resume_step = options.resume() ? start : -1;
  std::vector<std::shared_ptr<io::Recorder>> out{
      std::make_shared<io::MetricsFiles>(options.dir(), resume_step)};
  if (options.tensorboard()) {
    out.push_back(std::make_shared<io::TensorBoardFiles>(options.dir(), resume_step));
  }
  for (const auto& recorder : out) {
    // (written at the step the run starts from: a resumed run records its own)
    recorder->text(start, "run/config", markdown_code(resolved));
    recorder->text(start, "run/metadata", io::to_markdown(meta));
  }
  return out;
}

io::RunMetadata Run::State::start_record(const Place& place, int64_t start,
                                         const std::string& loaded, const std::string& resolved) {
  // What the run is: recorded once, when it starts; a resumed run keeps its record and says
  // where the configuration it resumes with differs.
  if (place.main) io::record_config(options.dir(), resolved, options.resume(), start, same_config);
  if (!description.empty()) {
    for (const auto& line : console_lines(description)) spdlog::info("{}", line);
  }
  io::RunMetadata meta;
  meta.started = io::utc_now();
  meta.build = build_info();
  meta.hostname = io::host_name();
  meta.seed = seed;
  meta.command = options.command_line();
  meta.world_size = place.world_size;
  if (!engine.problems().empty()) {
    meta.device = device_description(engine.problems().front()->device());
  }
  spdlog::info("device: {}", meta.device.empty() ? std::string("cpu") : meta.device);
  if (place.main && synthetic) spdlog::warn("this run uses SYNTHETIC data, not a real dataset");
  if (options.resume()) {
    spdlog::info("{}resumed from {} at global step {}",
                 place.restart.empty() ? "" : place.restart + ": ", loaded, start);
  } else if (!place.restart.empty() && place.main) {
    spdlog::warn("{}: no state was saved in {} before the failure, so the run starts over (a "
                 "state is saved every engine.save_step steps)",
                 place.restart, options.dir());
  }
  meta.start_step = start;
  meta.threads = at::get_num_threads();
  return meta;
}

void Run::State::finish(RunResult& result, const Place& place, io::RunMetadata meta,
                        const std::vector<std::shared_ptr<io::Recorder>>& recorders) {
  // The final state is saved (Checkpoints::on_end): a resumed run goes on from the last step,
  // and the evaluation below sees the best validation's parameters when asked to.
  result.evaluated_step = result.steps;
  if (const int64_t best = engine.restore_best(); best >= 0) {
    result.evaluated_step = best;
    spdlog::info("evaluating the parameters of global step {}, the best validation ({} {})", best,
                 engine.config().early_stopping().metric(),
                 format_metric(*engine.best_metric()));
  }
  // (validation and evaluation run on the ranks that validate: under zero3 every rank, whose
  // forward gathers the parameters from all)
  if (const auto valid = engine.validate(place.main ? "final validation" : "")) {
    result.valid = *valid;
  } else if (no_validation && place.main) {
    spdlog::info("final validation: none ({})", *no_validation);
  }
  if (final_hook) result.final = engine.evaluate(final_hook);
  if (!place.main) return;
  for (const auto& recorder : recorders) {
    if (!result.final.empty()) recorder->write(result.steps, "test", result.final);
  }
  meta.finished = io::utc_now();
  for (const auto& recorder : recorders) {
    recorder->text(result.steps, "run/metadata", io::to_markdown(meta));
  }
  io::RunResults record;
  record.experiment = name;
  record.meta = meta;
  record.steps = result.steps;
  record.evaluated_step = result.evaluated_step;
  record.stopped_early = engine.stopped_early();
  record.synthetic = synthetic;
  record.test = result.final;
  record.valid = result.valid;
  io::write_results(options.dir(), record);
  if (final_hook) {
    std::vector<std::string> headline = final_headline;
    if (headline.empty()) {
      for (const auto& item : result.final) headline.push_back(item.first);
    }
    for (const auto& line : console_lines("test: " + format_headline(result.final, headline))) {
      spdlog::info("{}", line);
    }
  }
  spdlog::info("results in {}", options.dir());
}

int guard(const std::function<void()>& body) {
  try {
    g_stopped_on_signal = false;
    body();
    return g_stopped_on_signal.exchange(false) ? 130 : 0;
  } catch (const Interrupted& e) {
    spdlog::error("interrupted: {}", e.what());
    dist::write_error_file(std::string("interrupted: ") + e.what());
    return 130;
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    dist::write_error_file(std::string("error: ") + e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::critical("failed: {}", e.what());
    dist::write_error_file(std::string("failed: ") + e.what());
    return 1;
  }
}

}  // namespace mlo
