#include <mlo/io/run.h>

#include "checkpoints.h"
#include "progress.h"
#include "restart.h"
#include "run_folder.h"
#include "run_metadata.h"
#include "run_record.h"

#include <mlo/base/device.h>
#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>
#include <mlo/core/engine.h>
#include <mlo/core/metrics.h>
#include <mlo/dist/error_file.h>
#include <mlo/dist/process_group.h>
#include <mlo/io/metrics.h>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>

namespace mlo {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_interrupted{false};
// Set when a run stopped on a signal (its own, or another rank's) rather than at its end or
// at stop_at; `guard` turns it into exit status 130, as a shell expects of an interrupted job.
std::atomic<bool> g_stopped_on_signal{false};

// Ctrl-C, or SIGTERM (what `mlo launch` forwards, and what schedulers send): save and stop.
extern "C" void on_interrupt(int sig) {
  g_interrupted = true;
  request_stop();  // (ends a rendezvous that waits for other ranks)
  std::signal(sig, SIG_DFL);  // a second one stops at once
}

// The logger of a run, replaced for its duration and put back after it (also on an error).
class Logging {
 public:
  // Console (info, or warnings only under a progress bar) plus the run's log file (info). Lines
  // start "[2026-01-31 12:00:00] [info] ": seconds are precise enough for a training log, so a
  // line keeps its width for the metrics. A rank other than 0 of a launch: console only,
  // warnings and errors unless `all` (its lines reach the launcher's output).
  Logging(const std::string& log_path, bool main, int rank, bool quiet_console, bool all)
      : previous_(spdlog::default_logger()) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    std::shared_ptr<spdlog::logger> logger;
    if (main) {
      console->set_level(quiet_console ? spdlog::level::warn : spdlog::level::info);
      auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_path, false);
      file->set_level(spdlog::level::info);
      logger = std::make_shared<spdlog::logger>("mlo", spdlog::sinks_init_list{console, file});
      logger->set_pattern("[%Y-%m-%d %H:%M:%S] [%^%l%$] %v");
    } else {
      console->set_level(all ? spdlog::level::info : spdlog::level::warn);
      logger = std::make_shared<spdlog::logger>("mlo-rank" + std::to_string(rank), console);
    }
    logger->set_level(spdlog::level::info);
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~Logging() { spdlog::set_default_logger(previous_); }
  Logging(const Logging&) = delete;
  Logging& operator=(const Logging&) = delete;

 private:
  std::shared_ptr<spdlog::logger> previous_;
};

// SIGINT and SIGTERM save and stop while alive; the previous handlers come back after.
class Signals {
 public:
  Signals() {
    g_interrupted = false;
    clear_stop_request();
    int_ = std::signal(SIGINT, on_interrupt);
    term_ = std::signal(SIGTERM, on_interrupt);
  }
  ~Signals() {
    std::signal(SIGINT, int_);
    std::signal(SIGTERM, term_);
  }
  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;

 private:
  void (*int_)(int) = nullptr;
  void (*term_)(int) = nullptr;
};

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

}  // namespace

void RunOptions::visit(Fields& f) {
  f("save_step", save_step_, at_least(0));
  f("tensorboard", tensorboard_);
}

RunOptions RunOptions::from_command_line(int argc, const char* const* argv,
                                         std::string default_dir) {
  RunOptions options(std::move(default_dir));
  bool have_dir = false;
  const std::string program = argc > 0 && argv[0] ? argv[0] : "program";
  const std::string usage = "usage: " + program +
                            " [DIR] [--resume] [--overwrite] [--stop-at STEP] [--no-progress]";
  for (int i = 0; i < argc; ++i) options.command_line_.push_back(argv[i] ? argv[i] : "");
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--resume") {
      options.resume(true);
    } else if (arg == "--overwrite") {
      options.overwrite(true);
    } else if (arg == "--no-progress") {
      options.progress(false);
    } else if (arg == "--stop-at") {
      MLO_CHECK(i + 1 < argc, "--stop-at needs a global step; ", usage);
      const std::string value = argv[++i];
      size_t used = 0;
      int64_t step = 0;
      try {
        step = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MLO_CHECK(used == value.size() && step > 0, "--stop-at: must be a global step >= 1, got '",
                value, "'");
      options.stop_at(step);
    } else if (!arg.empty() && arg[0] == '-') {
      throw Error("unknown option '" + arg + "'; " + usage);
    } else {
      MLO_CHECK(!have_dir, "one output folder, got '", options.dir(), "' and '", arg, "'; ",
                usage);
      options.dir(arg);
      have_dir = true;
    }
  }
  MLO_CHECK(!options.dir().empty(), "an empty output folder; ", usage);
  return options;
}

struct Run::State {
  State(Engine& e, RunOptions o) : engine(e), options(std::move(o)) {}
  Engine& engine;
  RunOptions options;
  std::optional<std::string> config;
  std::function<bool(const std::string&)> same_config;
  std::string name;
  std::optional<int64_t> seed;
  std::function<Metrics()> final_hook;
  std::vector<std::string> final_headline;
  std::string description;
  std::optional<std::string> no_validation;
  bool synthetic = false;
  std::function<void(int64_t)> step_hook;
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
Run& Run::on_step(std::function<void(int64_t)> hook) {
  state_->step_hook = std::move(hook);
  return *this;
}

RunResult Run::start() {
  State& s = *state_;
  Engine& engine = s.engine;
  const RunOptions& options = s.options;
  const EngineConfig& config = engine.config();
  {
    RunOptions copy = options;
    const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
    MLO_CHECK(failed.empty(), "run: ", failed);
    MLO_CHECK(options.stop_at() >= 0, "run: stop_at must be >= 0 (0: run to the end), got ",
              options.stop_at());
    MLO_CHECK(!(options.resume() && options.overwrite()), "'", options.dir(),
              "': resume continues the run there and overwrite replaces it; ask for one of them");
  }
  RunResult result;
  result.dir = options.dir();
  const fs::path out(options.dir());

  // The rank decides who writes what; under strategy default there is one process.
  const dist::Rendezvous where = dist::Rendezvous::from_env();
  MLO_CHECK(config.strategy() != dist::Strategy::kDefault || where.world_size == 1 ||
                where.from_scheduler,
            "WORLD_SIZE=",
            where.world_size, " but the engine's strategy is default; set engine.strategy to ",
            "distributed, zero1, zero2 or zero3 (e.g. --set engine.strategy=distributed), or run "
            "one process");
  const int rank = config.strategy() == dist::Strategy::kDefault ? 0 : where.rank;
  const bool main = rank == 0;
  const io::Checkpoints checkpoints(options.dir(), config.strategy(), rank);
  // A launcher's restart of its workers after a failure (torchrun --max-restarts, mlo launch
  // --max-restarts) continues from the run's last saved state, unasked; with none saved yet it
  // starts over as the first attempt did.
  std::string restart;
  if (where.restart_count > 0) {
    restart = "restart " + std::to_string(where.restart_count) + " by " + where.launcher;
    s.options = io::restarted(where, s.options);
  }

  // A finished run (its results written at train_iters, or by early stopping) has nothing to
  // resume: nothing runs, nothing is written. Every rank reads the same folder's results (a
  // resumed launch shares the folder: the ranks load rank 0's state from it), so all agree.
  // A run resumed with a larger train_iters goes on.
  if (options.resume()) {
    if (auto finished = io::finished_results(options.dir(), config.train_iters())) {
      result.already_finished = true;
      result.steps = finished->steps;
      result.evaluated_step = finished->evaluated_step;
      result.final = std::move(finished->test);
      result.valid = std::move(finished->valid);
      if (main) {
        spdlog::warn("the run in {} has finished (results.json, global step {}); nothing to "
                     "resume (resume with a larger engine.train_iters to train on)",
                     options.dir(), result.steps);
      }
      return result;
    }
  }
  // Rank 0 claims the folder (lock, and the checks of what it holds) before anything is
  // written; under zero the other ranks write their own state files into it.
  std::optional<io::RunFolder> folder;
  if (main) {
    folder.emplace(options.dir(), options.resume(), options.overwrite());
  } else if (checkpoints.saves()) {
    std::error_code error;
    fs::create_directories(out, error);
  }
  const bool terminal = main && options.progress().value_or(io::Progress::stderr_is_terminal());
  // Rank 0 only: the metrics files and the progress (made once the start step is known).
  std::optional<io::MetricsWriter> metrics;
  std::optional<io::Progress> progress;

  // The program's validation hook, wrapped so that its metrics (and the memory's) reach the
  // metrics files; the engine calls it on rank 0 only (on every rank under zero3, whose forward
  // gathers the parameters from all). Put back when the run ends.
  const auto user_validation = engine.validation_hook();
  const auto user_headline = engine.validation_headline();
  const auto user_on_step = engine.on_step_hook();
  struct Restore {
    Engine& engine;
    std::function<Metrics()> validation;
    std::vector<std::string> headline;
    std::function<bool(int64_t)> on_step;
    ~Restore() {
      engine.validation(validation, headline);
      engine.on_step(on_step);
    }
  } restore{engine, user_validation, user_headline, user_on_step};
  if (user_validation) {
    engine.validation(
        [&] {
          Metrics m = user_validation();
          for (const auto& [name, value] : engine.memory_metrics()) m.emplace(name, value);
          if (metrics) metrics->write(engine.global_step(), "validation", m);
          // (the engine logs the same line; under a progress bar the console shows warnings)
          if (terminal && progress) {
            std::vector<std::string> headline = user_headline;
            if (headline.empty()) {
              for (const auto& item : m) headline.push_back(item.first);
            }
            for (const auto& line :
                 console_lines("[validation] step " + std::to_string(engine.global_step()) +
                               "  " + format_headline(m, headline))) {
              progress->println(line);
            }
          }
          return m;
        },
        user_headline);
  }
  // NOTE: after the validation hook is set: loading a state initializes the engine, which
  // checks that early stopping has its hook.
  // NOTE: before the log is opened and the configuration recorded: a state that cannot be
  // resumed (damaged, or saved by another configuration) is refused with nothing written.
  int64_t start = 0;
  std::string loaded;
  // NOTE: from here on, before the state is loaded (which joins the process group): a signal
  // ends the wait for the other ranks at once.
  Signals signals;
  if (options.resume()) start = checkpoints.load(engine, &loaded);
  Logging logging((out / "log.txt").string(), main, rank, terminal, options.log_all_ranks());
  if (folder && !folder->replaced().empty()) {
    spdlog::info("the files of an earlier run in {} moved to {}", options.dir(),
                 folder->replaced());
  }

  // What the run is: recorded once, when it starts; a resumed run keeps its record and says
  // where the configuration it resumes with differs.
  const std::string resolved = s.config ? *s.config : engine_yaml(engine);
  if (main) io::record_config(options.dir(), resolved, options.resume(), start, s.same_config);
  if (!s.description.empty()) {
    for (const auto& line : console_lines(s.description)) spdlog::info("{}", line);
  }
  io::RunMetadata meta;
  meta.started = io::utc_now();
  meta.build = build_info();
  meta.hostname = io::host_name();
  meta.seed = s.seed;
  meta.command = options.command_line();
  meta.world_size = config.strategy() == dist::Strategy::kDefault ? 1 : where.world_size;
  if (!engine.problems().empty()) meta.device = device_description(engine.problems().front()->device());
  spdlog::info("device: {}", meta.device.empty() ? std::string("cpu") : meta.device);
  if (main && s.synthetic) spdlog::warn("this run uses SYNTHETIC data, not a real dataset");

  if (options.resume()) {
    spdlog::info("{}resumed from {} at global step {}", restart.empty() ? "" : restart + ": ",
                 loaded, start);
  } else if (!restart.empty() && main) {
    spdlog::warn("{}: no state was saved in {} before the failure, so the run starts over (a "
                 "state is saved every engine.save_step steps)", restart, options.dir());
  }
  meta.start_step = start;
  meta.threads = at::get_num_threads();
  if (main) {
    metrics.emplace(out.string(), options.resume() ? start : -1, options.tensorboard());
    // (written at the step the run starts from: a resumed run records its own)
    metrics->text(start, "run/config", markdown_code(resolved));
    metrics->text(start, "run/metadata", io::to_markdown(meta));
    progress.emplace(config.train_iters(), start, terminal, config.log_step());
  }

  bool stopped = false;
  bool save_due = false;        // a periodic save that waits for an accumulation window's end
  bool stop_requested = false;  // stop_at reached (the stop may wait for a window's end)
  bool window_note_logged = false;
  engine.on_step([&](int64_t step) {
    const int64_t log_step = config.log_step();
    if (metrics && log_step > 0 && step % log_step == 0) {
      for (const auto& problem : engine.problems()) {
        metrics->write(step, problem->name(), problem->metrics());
      }
    }
    if (progress) {
      progress->update(step, "loss " + format_metric(engine.problems().front()->last_loss()));
    }
    if (s.step_hook) s.step_hook(step);
    bool go_on = !user_on_step || user_on_step(step);
    // NOTE: a state saved inside a distributed run's accumulation window cannot be resumed
    // (Engine::state_resumable); it must never replace the last one that can. A save or a stop
    // that falls inside a window waits until every data-parallel level is at a window boundary
    // (a second Ctrl-C/SIGTERM ends the process at once, keeping the previous state).
    const bool resumable = engine.state_resumable();
    if (options.stop_at() > 0 && step == options.stop_at()) stop_requested = true;
    // (at train_iters the run ends anyway, with its results)
    if ((g_interrupted || stop_requested) && step < config.train_iters()) {
      if (resumable) {
        stopped = true;  // saved below, once every rank has stopped at this step
        return false;
      }
      if (!window_note_logged) {
        spdlog::warn("stop requested at global step {}, inside an accumulation window: finishing "
                     "the window first, so that the saved state can be resumed",
                     step);
        window_note_logged = true;
      }
    }
    if (options.save_step() > 0 && step % options.save_step() == 0) save_due = true;
    if (save_due && resumable) {
      checkpoints.save(engine);
      save_due = false;
    }
    return go_on;
  });
  {
    struct Finish {
      std::optional<io::Progress>& progress;
      ~Finish() {
        if (progress) progress->finish();
      }
    } finish{progress};
    engine.run();
  }
  result.steps = engine.global_step();
  // NOTE: under a launch another rank's hook may have stopped the run (its Ctrl-C came first):
  // every rank stopped at the same step, short of train_iters and not by early stopping.
  stopped = stopped || (result.steps < config.train_iters() && !engine.stopped_early());

  if (engine.state_resumable()) {
    checkpoints.save(engine);
  } else if (main) {
    // (an early stop, or train_iters, inside a window: the previous state stays)
    const bool kept = fs::exists(checkpoints.path());
    spdlog::warn("the run ended at global step {}, inside an accumulation window; its state "
                 "cannot be resumed exactly and is not saved ({})",
                 engine.global_step(),
                 kept ? checkpoints.path() + " keeps the previous one"
                      : "no earlier state was saved, so --resume is not possible");
  }
  if (stopped) {
    result.interrupted = true;
    // (a stop_at inside an accumulation window stops at the window's end, a little later)
    if (!(options.stop_at() > 0 && result.steps >= options.stop_at())) g_stopped_on_signal = true;
    if (main || checkpoints.saves()) {
      spdlog::warn("{} at global step {}; state saved to {}; continue with --resume",
                   g_interrupted ? "interrupted" : "stopped", result.steps, checkpoints.path());
    }
    return result;
  }
  // (under zero3 every rank evaluates with rank 0: a forward gathers the parameters from all)
  if (!main && !engine.validates_here()) return result;
  // The final state is saved (above): a resumed run goes on from the last step, and the
  // evaluation below sees the best validation's parameters when asked to.
  result.evaluated_step = result.steps;
  if (const int64_t best = engine.restore_best(); best >= 0) {
    result.evaluated_step = best;
    spdlog::info("evaluating the parameters of global step {}, the best validation ({} {})", best,
                 config.early_stopping().metric(), format_metric(*engine.best_metric()));
  }
  if (user_validation) {
    for (const auto& problem : engine.problems()) problem->eval();
    result.valid = user_validation();
    for (const auto& problem : engine.problems()) problem->train();
  }
  if (s.final_hook) {
    for (const auto& problem : engine.problems()) problem->eval();
    result.final = s.final_hook();
    for (const auto& problem : engine.problems()) problem->train();
  }
  if (!main) return result;
  if (!result.final.empty()) metrics->write(result.steps, "test", result.final);
  meta.finished = io::utc_now();
  metrics->text(result.steps, "run/metadata", io::to_markdown(meta));
  io::RunResults record;
  record.experiment = s.name;
  record.meta = meta;
  record.steps = result.steps;
  record.evaluated_step = result.evaluated_step;
  record.stopped_early = engine.stopped_early();
  record.synthetic = s.synthetic;
  record.test = result.final;
  record.valid = result.valid;
  io::write_results(options.dir(), record);
  std::vector<std::string> valid_headline = user_headline;
  if (valid_headline.empty()) {
    for (const auto& item : result.valid) valid_headline.push_back(item.first);
  }
  if (user_validation || s.no_validation) {
    const std::string valid = user_validation
                                  ? format_headline(result.valid, valid_headline)
                                  : "none (" + *s.no_validation + ")";
    for (const auto& line : console_lines("final validation: " + valid)) spdlog::info("{}", line);
  }
  if (s.final_hook) {
    std::vector<std::string> headline = s.final_headline;
    if (headline.empty()) {
      for (const auto& item : result.final) headline.push_back(item.first);
    }
    for (const auto& line : console_lines("test: " + format_headline(result.final, headline))) {
      spdlog::info("{}", line);
    }
  }
  spdlog::info("results in {}", options.dir());
  return result;
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
