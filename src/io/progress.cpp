#include "progress.h"

#include <mlo/core/engine.h>
#include <mlo/core/metrics.h>

#include <unistd.h>
#include <cstdio>

namespace mlo {
namespace io {
namespace {

std::string clock_text(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%02lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buffer;
}

}  // namespace

void Progress::on_start(Engine& engine) {
  total_ = engine.config().train_iters();
  start_ = step_ = engine.global_step();
  every_ = engine.config().log_step() > 0 ? engine.config().log_step() : 100;
  begin_ = last_draw_ = std::chrono::steady_clock::now();
}

StepDecision Progress::on_step_end(Engine& engine, const StepEnd& step) {
  update(step.step, "loss " + format_metric(engine.problems().front()->last_loss()));
  return StepDecision::kContinue;
}

void Progress::on_validation(Engine& engine, const Validation& validation) {
  (void)engine;
  if (!terminal_) return;
  for (const auto& line :
       console_lines("[validation] step " + std::to_string(validation.step) + "  " +
                     format_headline(validation.metrics, validation.headline))) {
    println(line);
  }
}

void Progress::on_end(Engine& engine, const StepEnd& last) {
  (void)engine;
  (void)last;
  finish();
}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void Progress::update(int64_t step, const std::string& status) {
  step_ = step;
  if (!status.empty()) status_ = status;
  const auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (now - last_draw_ >= std::chrono::milliseconds(100) || step == total_) {
      last_draw_ = now;
      draw();
    }
  } else if (step % every_ == 0 || step == total_) {
    draw();
  }
}

void Progress::draw() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
  const int64_t done = step_ - start_;
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - step_) / rate : -1.0;
  const double fraction = total_ > 0 ? static_cast<double>(step_) / static_cast<double>(total_) : 1;
  if (terminal_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
    std::fprintf(stderr, "\r\033[K[%s] %lld/%lld %3.0f%% %.1f it/s ETA %s %s", bar.c_str(),
                 static_cast<long long>(step_), static_cast<long long>(total_), 100 * fraction,
                 rate, clock_text(eta).c_str(), status_.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "progress: step %lld/%lld (%.0f%%), %.1f it/s, elapsed %s, ETA %s %s\n",
                 static_cast<long long>(step_), static_cast<long long>(total_), 100 * fraction,
                 rate, clock_text(elapsed).c_str(), clock_text(eta).c_str(), status_.c_str());
  }
  std::fflush(stderr);
}

void Progress::println(const std::string& line) {
  if (terminal_ && drawn_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", line.c_str());
  if (terminal_ && drawn_) draw();
  std::fflush(stderr);
}

void Progress::finish() {
  if (terminal_ && drawn_) {
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace io
}  // namespace mlo
