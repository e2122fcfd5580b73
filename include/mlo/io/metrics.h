#pragma once
/// \file
/// Metrics files: every record goes to `metrics.csv` (long format: step,source,metric,value) and
/// `metrics.jsonl` (one JSON object per record) in a run's output folder, every value at full
/// precision (the shortest text that reads back exactly), flushed as written so a crash loses
/// nothing already logged. (A run also writes them as TensorBoard event files:
/// io/tensorboard.h.)

#include <mlo/core/metrics.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace mlo {
namespace io {

/// Writes a run's metrics records to both files (CSV and JSON lines), one record per call.
class MetricsWriter {
 public:
  /// Opens (creates) the two files in `dir`. With `resume_step` >= 0 the existing files are kept
  /// up to that global step (records written after the saved state are dropped), then appended.
  /// A file is rewritten to drop records through a temporary file renamed over it, so a crash
  /// meanwhile leaves it whole; a record at or before `resume_step` is never dropped. On resume
  /// each file is checked line by line: one that is not mlo's (another header, a line that is
  /// not a record; a last line cut off by a crash after the saved state is only dropped) is
  /// moved, unchanged, to `<file>.damaged-<UTC time>`, and a missing one is recreated; either
  /// way a new file is started (the CSV with its header) and a warning, kept in `warnings()`,
  /// names the file, what was wrong and which records it lacks. Throws `mlo::Error` naming the
  /// file when it cannot be read, moved or written.
  explicit MetricsWriter(const std::string& dir, int64_t resume_step = -1);

  /// Writes one record: `source` is a problem name or "validation", "test", ... Throws
  /// `mlo::Error` for a metric name that `is_metric_name` refuses (before writing anything).
  void write(int64_t step, const std::string& source, const Metrics& metrics);

  /// The CSV file being written: `<dir>/metrics.csv`.
  const std::string& csv_path() const { return csv_path_; }
  /// The JSON-lines file being written: `<dir>/metrics.jsonl`.
  const std::string& jsonl_path() const { return jsonl_path_; }
  /// What resuming had to repair (a file missing or not mlo's, as logged); empty when the files
  /// were as expected or the run is new.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::string csv_path_;
  std::string jsonl_path_;
  std::ofstream csv_;
  std::ofstream jsonl_;
  std::vector<std::string> warnings_;
};

}  // namespace io
}  // namespace mlo
