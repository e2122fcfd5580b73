#include "fault.h"

#include <mlo/base/error.h>

#include <signal.h>

#include <cctype>
#include <cstdlib>
#include <utility>
#include <vector>

namespace mlo {
namespace cli {
namespace {

// The signals a fault can be: the ones a scheduler, a user or a crash sends a run.
const std::vector<std::pair<std::string, int>>& signal_names() {
  static const std::vector<std::pair<std::string, int>> names{
      {"TERM", SIGTERM}, {"INT", SIGINT}, {"KILL", SIGKILL}, {"STOP", SIGSTOP}};
  return names;
}

// A whole non-negative decimal number, or -1.
int64_t parse_count(const std::string& text) {
  if (text.empty() || text.size() > 18) return -1;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  }
  return std::stoll(text);
}

}  // namespace

RaiseAt RaiseAt::parse(const std::string& text) {
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const size_t end = text.find(':', begin);
    parts.push_back(text.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  MLO_CHECK(parts.size() == 2 || parts.size() == 3, "--raise-at '", text,
            "': expected STEP:SIGNAL or STEP:SIGNAL:RANK, e.g. 7:TERM or 7:KILL:1");
  RaiseAt out;
  out.step = parse_count(parts[0]);
  MLO_CHECK(out.step >= 1, "--raise-at '", text, "': STEP must be a global step >= 1, got '",
            parts[0], "'");
  std::string name = parts[1];
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  std::string valid;
  for (const auto& [known, number] : signal_names()) {
    if (known == name) out.signal = number;
    valid += (valid.empty() ? "" : ", ") + known;
  }
  MLO_CHECK(out.signal != 0, "--raise-at '", text, "': unknown signal '", parts[1], "'; one of ",
            valid);
  if (parts.size() == 3) {
    const int64_t rank = parse_count(parts[2]);
    MLO_CHECK(rank >= 0 && rank < (1 << 20), "--raise-at '", text,
              "': RANK must be a rank >= 0, got '", parts[2], "'");
    out.rank = static_cast<int>(rank);
  }
  return out;
}

void RaiseAt::maybe_raise(int64_t at, int this_rank) const {
  if (signal == 0 || at != step || (rank >= 0 && rank != this_rank)) return;
  // NOTE: raise() delivers to this thread before it returns, so a handled signal (TERM, INT)
  // has set the run's flag by the time the step's stop check reads it.
  ::raise(signal);
}

}  // namespace cli
}  // namespace mlo
