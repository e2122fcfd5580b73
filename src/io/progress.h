#pragma once
// Part of src/io (internal): a run's progress line.
/// \file
/// Progress of a long run: on a terminal, one redrawn line with a bar, step, rate and ETA; when
/// not a terminal, a plain line every `every` steps (so logs and CI output stay readable).

#include <chrono>
#include <cstdint>
#include <string>

namespace mlo {
namespace io {

class Progress {
 public:
  /// `total` steps, starting after `start` (a resumed run); `terminal` draws the redrawn bar.
  Progress(int64_t total, int64_t start, bool terminal, int64_t every);
  /// Reports that `step` is done; `status` is a short text (e.g. the latest loss).
  void update(int64_t step, const std::string& status = "");
  /// Prints a full line above the bar (or plainly).
  void println(const std::string& line);
  /// Ends the bar line.
  void finish();
  /// Whether standard error is a terminal.
  static bool stderr_is_terminal();

 private:
  void draw();

  int64_t total_, start_, step_;
  bool terminal_;
  int64_t every_;
  std::string status_;
  std::chrono::steady_clock::time_point begin_, last_draw_;
  bool drawn_ = false;
};

}  // namespace io
}  // namespace mlo
