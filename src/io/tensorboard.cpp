#include <mlo/io/tensorboard.h>

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include "record_file.h"
#include "tensorboard_event.pb.h"

#include <chrono>
#include <filesystem>

namespace mlo {
namespace io {
namespace {

namespace tb = mlo::io::tensorboard;

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string serialized(const tb::Event& event) {
  std::string bytes;
  MLO_CHECK(event.SerializeToString(&bytes), "cannot serialize a TensorBoard event");
  return bytes;
}

bool is_text(const tb::Event& event) {
  if (!event.has_summary()) return false;
  for (const auto& value : event.summary().value()) {
    if (value.has_tensor()) return true;
  }
  return false;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resume_step)
    : path_(dir + "/events.out.tfevents.mlo") {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  MLO_CHECK(!error, "cannot create the TensorBoard folder '", dir, "': ", error.message());
  // NOTE: the kept events are rewritten atomically: a crash while resuming leaves the old file.
  std::vector<std::string> kept;
  if (resume_step >= 0) {
    for (auto& record : read_records(path_)) {
      tb::Event event;
      MLO_CHECK(event.ParseFromString(record), "TensorBoard event file '", path_,
                "': a record is not an event");
      const bool after = event.step() > resume_step ||
                         (event.step() == resume_step && is_text(event));
      if (event.has_file_version() || !after) kept.push_back(std::move(record));
    }
  }
  if (kept.empty()) {
    tb::Event header;
    header.set_wall_time(now_seconds());
    header.set_file_version("brain.Event:2");
    kept.push_back(serialized(header));
  }
  write_file_atomically(path_, [&](std::ostream& out) {
    for (const auto& record : kept) write_record(out, record);
  });
  out_.open(path_, std::ios::binary | std::ios::app);
  MLO_CHECK(out_.good(), "cannot write the TensorBoard event file '", path_, "'");
}

void TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, double>>& values) {
  tb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    auto* entry = event.mutable_summary()->add_value();
    entry->set_tag(tag);
    entry->set_simple_value(static_cast<float>(value));
  }
  append(serialized(event));
}

void TensorBoardWriter::text(int64_t step, const std::string& tag, const std::string& markdown) {
  tb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  auto* entry = event.mutable_summary()->add_value();
  entry->set_tag(tag);
  entry->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  auto* tensor = entry->mutable_tensor();
  tensor->set_dtype(tb::DT_STRING);
  tensor->mutable_tensor_shape()->add_dim()->set_size(1);
  tensor->add_string_val(markdown);
  append(serialized(event));
}

void TensorBoardWriter::append(const std::string& event) {
  write_record(out_, event);
  out_.flush();
  MLO_CHECK(out_.good(), "cannot write the TensorBoard event file '", path_, "'");
}

}  // namespace io
}  // namespace mlo
