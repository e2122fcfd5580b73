#pragma once
/// \file
/// TensorBoard event files: a run's scalars and texts in the format TensorBoard reads
/// (`tensorboard --logdir runs/`), one more metrics sink beside `metrics.csv` and
/// `metrics.jsonl` (io/metrics.h). Records are TFRecord-framed `Event` protobuf messages with
/// masked CRC-32C checksums, flushed as written.

#include <mlo/core/metrics.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace io {

/// Writes one event file, `<dir>/events.out.tfevents.mlo`.
class TensorBoardWriter {
 public:
  /// Opens the event file in `dir` (created when missing). With `resume_step` < 0 the file
  /// starts empty (a previous run's file there is replaced). With `resume_step` >= 0 the
  /// existing file keeps its events up to that global step (what was written after the saved
  /// state is dropped, as are texts of that very step: the resumed run writes its own), then is
  /// appended to; each step appears once. A damaged record (a crash, a power loss) ends what is
  /// kept, with a warning; a missing file starts anew. The file is rewritten atomically, through
  /// a temporary name TensorBoard does not read. (A `tensorboard` server that was reading the
  /// file may need a restart after a resume.) Throws `mlo::Error` when it cannot be written.
  explicit TensorBoardWriter(const std::string& dir, int64_t resume_step = -1);

  /// One event at `step` holding every (tag, value) as a scalar (TensorBoard's Scalars tab;
  /// stored as 32-bit floats, as the format's scalars are). A byte of a tag that is not valid
  /// UTF-8 becomes U+FFFD, as in metrics.jsonl.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  /// One record of a run's metrics (`source`: a problem's name, "validation", "test") as
  /// `scalars`, each tagged `tensorboard_tag(source, name)`.
  void write(int64_t step, const std::string& source, const Metrics& metrics);

  /// A text at `step` under `tag` (TensorBoard's Text tab renders it as Markdown).
  void text(int64_t step, const std::string& tag, const std::string& markdown);

  /// The event file.
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

/// A record's TensorBoard tag: `<source>/<name>` ("classifier/loss", "test/balanced_acc"),
/// except that names which already carry their source's prefix stay as they are (validation
/// records hold "valid/acc": its tag is "valid/acc").
std::string tensorboard_tag(const std::string& source, const std::string& name);

}  // namespace io
}  // namespace mlo
