#pragma once
// Part of src/io (internal): a run's metrics.csv and metrics.jsonl (io::MetricsWriter) as a
// recorder of mlo::Run (recorder.h); a resumed run keeps their records up to its saved step.

#include "recorder.h"

#include <mlo/io/metrics.h>

#include <cstdint>
#include <optional>
#include <string>

namespace mlo {
namespace io {

/// The global step of the last whole record in `dir/metrics.jsonl`; nullopt when the file is
/// missing, unreadable or holds none.
std::optional<int64_t> last_metrics_step(const std::string& dir);

class MetricsFiles : public Recorder {
 public:
  /// The files in `dir`; `resume_step` as `MetricsWriter` takes it (-1: a new run).
  MetricsFiles(const std::string& dir, int64_t resume_step) : writer_(dir, resume_step) {}
  void write(int64_t step, const std::string& source, const Metrics& metrics) override {
    writer_.write(step, source, metrics);
  }

 private:
  MetricsWriter writer_;
};

}  // namespace io
}  // namespace mlo
