#pragma once
// Part of src/io (internal): a run's TensorBoard event files in `<dir>/tb/` (io::TensorBoardWriter)
// as a recorder of mlo::Run (recorder.h): every record as scalars tagged `tensorboard_tag(source,
// name)`, the texts in TensorBoard's Text tab; a resumed run keeps the events up to its saved
// step.

#include "recorder.h"

#include <mlo/io/tensorboard.h>

namespace mlo {
namespace io {

class TensorBoardFiles : public Recorder {
 public:
  /// The event file in `dir`/tb; `resume_step` as `TensorBoardWriter` takes it (-1: a new run).
  TensorBoardFiles(const std::string& dir, int64_t resume_step)
      : writer_(dir + "/tb", resume_step) {}
  void write(int64_t step, const std::string& source, const Metrics& metrics) override {
    writer_.write(step, source, metrics);
  }
  void text(int64_t step, const std::string& tag, const std::string& markdown) override {
    writer_.text(step, tag, markdown);
  }

 private:
  TensorBoardWriter writer_;
};

}  // namespace io
}  // namespace mlo
