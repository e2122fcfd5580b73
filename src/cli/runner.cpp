#include "runner.h"

#include "checkpoint.h"
#include "progress.h"
#include "run_metadata.h"

#include <mlo/core/engine.h>
#include <mlo/core/metrics.h>
#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include <mlo/io/metrics.h>
#include <mlo/run/device.h>
#include <mlo/io/state.h>
#include <mlo/run/yaml.h>
#include <mlo/run/experiment.h>
#include <mlo/run/sharding.h>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace mlo {
namespace cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_interrupted{false};

// Whether a saved config.yaml means the same as `resolved`: read back and written again, so
// that one saved by an earlier writer (other forms of the same numbers) still matches.
bool same_config(const std::string& saved, const std::string& resolved,
                 const std::string& source) {
  if (saved == resolved) return true;
  try {
    return run::to_yaml(run::parse_run_config(saved, source)) == resolved;
  } catch (const std::exception&) {
    return false;  // unreadable now: say it differs
  }
}

// Ctrl-C, or SIGTERM (what `mlo launch` forwards, and what schedulers send): save and stop.
extern "C" void on_interrupt(int sig) {
  g_interrupted = true;
  std::signal(sig, SIG_DFL);  // a second one stops at once
}

// Console (info, or warnings only under a progress bar) plus the run's log file (info). Lines
// start "[2026-01-31 12:00:00] [info] ": the logger's name is always "mlo" here, and seconds
// are precise enough for a training log, so a line keeps its width for the metrics.
void setup_logging(const std::string& log_path, bool quiet_console) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(quiet_console ? spdlog::level::warn : spdlog::level::info);
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_path, /*truncate=*/false);
  file->set_level(spdlog::level::info);
  auto logger = std::make_shared<spdlog::logger>("mlo", spdlog::sinks_init_list{console, file});
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
}

// A rank other than 0 of a launch: console only, warnings and errors unless `all` (its lines
// reach the launcher's output, prefixed with the rank).
void setup_rank_logging(int rank, bool all) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(all ? spdlog::level::info : spdlog::level::warn);
  auto logger = std::make_shared<spdlog::logger>("mlo-rank" + std::to_string(rank), console);
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void restore_logging() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("mlo-console-" + std::to_string(std::rand())));
}

void write_file(const fs::path& path, const std::string& text) {
  write_file_atomically(path.string(), [&](std::ostream& out) { out << text; });
}

// A metric value as JSON: a number, or a string for NaN and the infinities (which JSON lacks).
nlohmann::json json_value(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "NaN" : (value > 0 ? "Infinity" : "-Infinity");
}

// {"experiment": ..., "meta": {...}, "steps": N, "synthetic": b, "test": {...}, "valid": {...}}:
// the test metrics (the number to report), the final validation metrics (the number to choose
// hyperparameters by) and what produced them (run_metadata.h).
std::string results_json(const std::string& experiment, const Metrics& test, const Metrics& valid,
                         int64_t steps, int64_t evaluated_step, bool synthetic,
                         const RunMetadata& meta) {
  nlohmann::json out;
  out["experiment"] = experiment;
  out["meta"] = to_json(meta);
  out["steps"] = steps;
  out["evaluated_step"] = evaluated_step;
  out["synthetic"] = synthetic;
  out["test"] = nlohmann::json::object();
  out["valid"] = nlohmann::json::object();
  for (const auto& [name, value] : test) out["test"][name] = json_value(value);
  for (const auto& [name, value] : valid) out["valid"][name] = json_value(value);
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// `text` as a Markdown code block (every line indented by four spaces).
std::string markdown_code(const std::string& text) {
  std::string out = "    ";
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += "    ";
  }
  return out;
}

// The experiment's headline metrics, each name prefixed: {"valid/acc", "valid/balanced_acc"}.
std::vector<std::string> headline_names(const run::Experiment& experiment,
                                        const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& name : experiment.metric_names()) names.push_back(prefix + name);
  return names;
}

}  // namespace

RunResult run_experiment(const run::RunConfig& config, const RunOptions& options) {
  RunMetadata meta;
  meta.started = utc_now();
  meta.build = build_info();
  meta.hostname = host_name();
  meta.seed = config.seed;
  meta.command = options.command_line;
  RunResult result;
  result.out_dir = options.out_dir.empty() ? "runs/" + config.name : options.out_dir;
  const fs::path out(result.out_dir);
  // Refuses WORLD_SIZE > 1 under strategy default before anything is written.
  const data::Shard shard = run::launch_shard(config);
  const int rank = static_cast<int>(shard.rank);
  meta.world_size = shard.world_size;
  // A GPU asked for and not there: an error, before anything is written.
  const c10::Device device = run::resolve_device(config);
  const bool main = rank == 0;
  const Checkpoints checkpoints(result.out_dir, config.engine.strategy, rank);
  if (main || checkpoints.saves()) fs::create_directories(out);
  const bool terminal = main && options.progress.value_or(Progress::stderr_is_terminal());
  if (main) {
    setup_logging((out / "log.txt").string(), terminal);
  } else {
    setup_rank_logging(rank, options.log_all_ranks);
  }

  const std::string resolved = run::to_yaml(config);
  if (main && options.resume && fs::exists(out / "config.yaml")) {
    std::ifstream previous(out / "config.yaml");
    std::stringstream text;
    text << previous.rdbuf();
    if (!same_config(text.str(), resolved, (out / "config.yaml").string())) {
      spdlog::warn(
          "resuming with a configuration that differs from {}; the run continues with "
          "the new one",
          (out / "config.yaml").string());
    }
  }
  if (main) write_file(out / "config.yaml", resolved);

  const auto owned = run::make_experiment(config);
  run::Experiment& experiment = *owned;
  for (const auto& line : console_lines(experiment.describe())) spdlog::info("{}", line);
  meta.device = run::device_description(device);
  spdlog::info("device: {}", meta.device);
  if (main && experiment.synthetic()) {
    spdlog::warn("this run uses SYNTHETIC data, not a real dataset");
  }

  Engine& engine = experiment.engine();
  // Rank 0 only: the metrics files and the progress (made once the start step is known).
  std::optional<io::MetricsWriter> metrics;
  std::optional<Progress> progress;

  // Validation (and early stopping) sees only the validation set held out of the training data;
  // the test set is evaluated once, after training. The engine calls it on rank 0 only (on
  // every rank under zero3, whose forward gathers the parameters from all ranks). An
  // experiment without a validation split gets no hook: early stopping is then refused.
  const std::optional<std::string> no_validation = experiment.missing_validation();
  std::vector<std::string> valid_headline = headline_names(experiment, "valid/");
  if (config.engine.early_stopping.enabled) {
    const std::string& watched = config.engine.early_stopping.metric;
    if (std::count(valid_headline.begin(), valid_headline.end(), watched) == 0) {
      valid_headline.push_back(watched);
    }
  }
  if (!no_validation) {
    engine.validation(
        [&] {
          Metrics m = experiment.evaluate(run::EvalSet::kValid);
          for (const auto& [name, value] : engine.memory_metrics()) m.emplace(name, value);
          if (metrics) metrics->write(engine.global_step(), "validation", m);
          // (the engine logs the same line; under a progress bar the console shows warnings only)
          if (terminal && progress) {
            for (const auto& line :
                 console_lines("[validation] step " + std::to_string(engine.global_step()) +
                               "  " + format_headline(m, valid_headline))) {
              progress->println(line);
            }
          }
          return m;
        },
        valid_headline);
  }
  // NOTE: after the validation hook is set: loading a state initializes the engine, which
  // checks that early stopping has its hook.
  int64_t start = 0;
  if (options.resume) {
    std::string loaded;
    start = checkpoints.load(engine, &loaded);
    spdlog::info("resumed from {} at global step {}", loaded, start);
  }
  meta.start_step = start;
  meta.threads = at::get_num_threads();
  if (main) {
    metrics.emplace(out.string(), options.resume ? start : -1, config.logging.tensorboard);
    // (written at the step the run starts from: a resumed run records its own)
    metrics->text(start, "run/config", markdown_code(resolved));
    metrics->text(start, "run/metadata", to_markdown(meta));
    progress.emplace(config.engine.train_iters, start, terminal, config.engine.log_step);
  }
  g_interrupted = false;
  bool stopped = false;
  bool save_due = false;  // a periodic save that waits for an accumulation window's end
  bool stop_requested = false;  // --stop-at reached (the stop may wait for a window's end)
  bool window_note_logged = false;
  const auto previous_handler = std::signal(SIGINT, on_interrupt);
  const auto previous_term = std::signal(SIGTERM, on_interrupt);
  const auto restore_signals = [&] {
    std::signal(SIGINT, previous_handler);
    std::signal(SIGTERM, previous_term);
  };
  engine.on_step([&](int64_t step) {
    const int64_t log_step = config.engine.log_step;
    if (metrics && log_step > 0 && step % log_step == 0) {
      for (const auto& problem : engine.problems()) {
        metrics->write(step, problem->name(), problem->metrics());
      }
    }
    if (progress) {
      progress->update(step, "loss " + format_metric(engine.problems().front()->last_loss()));
    }
    options.raise_at.maybe_raise(step, rank);
    // NOTE: a state saved inside a distributed run's accumulation window cannot be resumed
    // (Engine::state_resumable); it must never replace the last one that can. A save or a stop
    // that falls inside a window waits until every data-parallel level is at a window boundary
    // (a second Ctrl-C/SIGTERM ends the process at once, keeping the previous state).
    const bool resumable = engine.state_resumable();
    if (options.stop_at > 0 && step == options.stop_at) stop_requested = true;
    // (at train_iters the run ends anyway, with its results)
    if ((g_interrupted || stop_requested) && step < config.engine.train_iters) {
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
    if (config.engine.save_step > 0 && step % config.engine.save_step == 0) save_due = true;
    if (save_due && resumable) {
      checkpoints.save(engine);
      save_due = false;
    }
    return true;
  });
  try {
    engine.run();
  } catch (...) {
    restore_signals();
    if (progress) progress->finish();
    restore_logging();
    throw;
  }
  restore_signals();
  if (progress) progress->finish();
  result.steps = engine.global_step();
  // NOTE: under a launch another rank's hook may have stopped the run (its Ctrl-C came first):
  // every rank stopped at the same step, short of train_iters and not by early stopping.
  stopped = stopped || (result.steps < config.engine.train_iters && !engine.stopped_early());

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
    if (main || checkpoints.saves()) {
      spdlog::warn("{} at global step {}; state saved to {}; continue with --resume",
                   g_interrupted ? "interrupted" : "stopped", result.steps, checkpoints.path());
    }
    restore_logging();
    return result;
  }
  // (under zero3 every rank evaluates with rank 0: a forward gathers the parameters from all)
  if (!main && !engine.validates_here()) {
    restore_logging();
    return result;
  }
  // The final state is saved (above): a resumed run goes on from the last step, and the
  // evaluation below sees the best validation's parameters when asked to.
  result.evaluated_step = result.steps;
  if (const int64_t best = engine.restore_best(); best >= 0) {
    result.evaluated_step = best;
    spdlog::info("evaluating the parameters of global step {}, the best validation ({} {})", best,
                 config.engine.early_stopping.metric, format_metric(*engine.best_metric()));
  }
  if (!no_validation) result.valid = experiment.evaluate(run::EvalSet::kValid);
  result.test = experiment.evaluate(run::EvalSet::kTest);
  if (!main) {
    restore_logging();
    return result;
  }
  metrics->write(result.steps, "test", result.test);
  meta.finished = utc_now();
  metrics->text(result.steps, "run/metadata", to_markdown(meta));
  write_file(out / "results.json",
             results_json(config.experiment, result.test, result.valid, result.steps,
                          result.evaluated_step, experiment.synthetic(), meta));
  std::cout << experiment.report(result.test, result.valid) << "results in " << out.string()
            << "\n";
  const std::string valid =
      no_validation ? "none (" + *no_validation + ")"
                    : format_headline(result.valid, headline_names(experiment, "valid/"));
  for (const auto& line : console_lines("final validation: " + valid)) spdlog::info("{}", line);
  const std::string test = format_headline(result.test, headline_names(experiment, ""));
  for (const auto& line : console_lines("test: " + test)) spdlog::info("{}", line);
  restore_logging();
  return result;
}

}  // namespace cli
}  // namespace mlo
