#include "stop_requests.h"

#include <mlo/base/stop_request.h>
#include <mlo/core/engine.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>

namespace mlo {
namespace io {
namespace {

std::atomic<bool> g_signalled{false};

extern "C" void on_stop_signal(int sig) {
  g_signalled = true;
  request_stop();             // (ends a rendezvous that waits for other ranks)
  std::signal(sig, SIG_DFL);  // a second one stops at once
}

}  // namespace

StopRequests::StopRequests(int64_t stop_at) : stop_at_(stop_at) {
  g_signalled = false;
  clear_stop_request();
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopRequests::~StopRequests() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

bool StopRequests::signalled() { return g_signalled; }

StepDecision StopRequests::on_step_end(Engine& engine, const StepEnd& step) {
  if (stop_at_ > 0 && step.step == stop_at_) requested_ = true;
  // (at train_iters the run ends anyway, with its results)
  if (!(g_signalled || requested_) || step.step >= engine.config().train_iters()) {
    return StepDecision::kContinue;
  }
  if (step.resumable) {
    stopped_ = true;  // the state is saved when the loop ends (Checkpoints::on_end)
    return StepDecision::kPause;
  }
  if (!window_note_logged_) {
    spdlog::warn("stop requested at global step {}, inside an accumulation window: finishing "
                 "the window first, so that the saved state can be resumed",
                 step.step);
    window_note_logged_ = true;
  }
  return StepDecision::kContinue;
}

}  // namespace io
}  // namespace mlo
