#pragma once
// Part of src/io (internal): a run's log, for as long as the run lives. It replaces spdlog's
// default logger and puts the previous one back when destroyed (also on an error). Rank 0 logs
// to the console (info, or warnings only under a progress bar) and to the run's log file (info);
// lines start "[2026-01-31 12:00:00] [info] ": seconds are precise enough for a training log, so
// a line keeps its width for the metrics. Another rank of a launch logs to the console only,
// warnings and errors unless `all_ranks` (its lines reach the launcher's output).

#include <memory>
#include <string>

namespace spdlog {
class logger;
}  // namespace spdlog

namespace mlo {
namespace io {

class LogFile {
 public:
  LogFile(const std::string& path, bool main, int rank, bool quiet_console, bool all_ranks);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

 private:
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace io
}  // namespace mlo
