#include <mlo/io/tensorboard.h>

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include "record_file.h"
#include "tensorboard_event.pb.h"

#include <spdlog/spdlog.h>

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

// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD (as metrics.jsonl
// writes it): a tag is a protobuf string, which readers refuse unless it is UTF-8.
std::string valid_utf8(const std::string& text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xe ? 3
                                : (byte >> 3) == 0x1e ? 4 : 0;
    // (C0, C1 and F5..FF never start a valid sequence)
    bool valid = length > 0 && i + length <= text.size() && byte != 0xc0 && byte != 0xc1 &&
                 byte < 0xf5;
    for (size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    }
    if (valid) {
      out.append(text, i, length);
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
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
  std::vector<std::string> kept;
  if (resume_step >= 0) {
    std::string damage;
    for (auto& record : read_records(path_, &damage)) {
      tb::Event event;
      if (!event.ParseFromString(record)) {
        damage = "a record is not an event";
        break;
      }
      const bool after = event.step() > resume_step ||
                         (event.step() == resume_step && is_text(event));
      if (event.has_file_version() || !after) kept.push_back(std::move(record));
    }
    if (!damage.empty()) {
      spdlog::warn("TensorBoard event file {}: {}; the events from there on are dropped (the "
                   "metrics files keep them)",
                   path_, damage);
    }
  }
  if (kept.empty()) {
    tb::Event header;
    header.set_wall_time(now_seconds());
    header.set_file_version("brain.Event:2");
    kept.push_back(serialized(header));
  }
  // NOTE: rewritten atomically through a name without "tfevents": TensorBoard reads every file
  // whose name has it, and a temporary one left by a crash would show each step twice.
  const std::string rewrite = dir + "/.rewrite";
  write_file_atomically(rewrite, [&](std::ostream& out) {
    for (const auto& record : kept) write_record(out, record);
  });
  std::filesystem::rename(rewrite, path_, error);
  MLO_CHECK(!error, "cannot write the TensorBoard event file '", path_, "': ", error.message());
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
    entry->set_tag(valid_utf8(tag));
    entry->set_simple_value(static_cast<float>(value));
  }
  append(serialized(event));
}

void TensorBoardWriter::text(int64_t step, const std::string& tag, const std::string& markdown) {
  tb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  auto* entry = event.mutable_summary()->add_value();
  entry->set_tag(valid_utf8(tag));
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
