#pragma once
/// \file
/// Metrics sinks: every record goes to `metrics.csv` (long format: step,source,metric,value) and
/// `metrics.jsonl` (one JSON object per record) in a run's output folder, every value at full
/// precision (the shortest text that reads back exactly), flushed as written so a crash loses
/// nothing already logged.

#include <mlo/core/problem.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace mlo {
namespace io {

/// Writes a run's metrics records to both files (CSV and JSON lines), one record per call.
class MetricsWriter {
 public:
  /// Opens (creates) the two files in `dir`. With `resume_step` >= 0 the existing files are kept
  /// up to that global step (records written after the saved state are dropped), then appended.
  explicit MetricsWriter(const std::string& dir, int64_t resume_step = -1);

  /// Writes one record: `source` is a problem name or "validation", "test", ... Throws
  /// `mlo::Error` for a metric name that `is_metric_name` refuses (before writing anything).
  void write(int64_t step, const std::string& source, const Metrics& metrics);

  /// The files being written.
  const std::string& csv_path() const { return csv_path_; }
  const std::string& jsonl_path() const { return jsonl_path_; }

 private:
  std::string csv_path_;
  std::string jsonl_path_;
  std::ofstream csv_;
  std::ofstream jsonl_;
};

}  // namespace io
}  // namespace mlo
