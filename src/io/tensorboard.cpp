#include <mlo/io/tensorboard.h>


#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include "event_message.h"
#include "record_file.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

namespace mlo {
namespace io {
namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
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
      const auto event = event::read(record);
      if (!event) {
        damage = "a record is not an event";
        break;
      }
      const bool after =
          event->step > resume_step || (event->step == resume_step && event->text);
      if (event->file_version || !after) kept.push_back(std::move(record));
    }
    if (!damage.empty()) {
      // The damaged file is kept as it was, under a name TensorBoard does not read (every name
      // with "tfevents" in it is read, and would show each step twice).
      const std::string aside = unused_timestamped(dir + "/events.damaged-");
      std::filesystem::copy_file(path_, aside, error);
      MLO_CHECK(!error, "the TensorBoard event file '", path_, "' is damaged (", damage,
                ") and cannot be copied aside to '", aside, "': ", error.message(),
                "; move it away yourself, then resume");
      spdlog::warn("TensorBoard event file {}: {}; the events from there on are dropped from it "
                   "(the metrics files keep them; the file as it was is kept in {})",
                   path_, damage, aside);
    }
  }
  if (kept.empty()) kept.push_back(event::file_version(now_seconds()));
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

std::string tensorboard_tag(const std::string& source, const std::string& name) {
  if (source == "validation" && name.rfind("valid/", 0) == 0) return name;
  return source + "/" + name;
}

void TensorBoardWriter::write(int64_t step, const std::string& source, const Metrics& metrics) {
  std::vector<std::pair<std::string, double>> values;
  values.reserve(metrics.size());
  for (const auto& [name, value] : metrics) values.emplace_back(tensorboard_tag(source, name), value);
  scalars(step, values);
}

void TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::pair<std::string, float>> entries;
  entries.reserve(values.size());
  for (const auto& [tag, value] : values) {
    entries.emplace_back(valid_utf8(tag), static_cast<float>(value));
  }
  append(event::scalars(now_seconds(), step, entries));
}

void TensorBoardWriter::text(int64_t step, const std::string& tag, const std::string& markdown) {
  append(event::text(now_seconds(), step, valid_utf8(tag), markdown));
}

void TensorBoardWriter::append(const std::string& event) {
  write_record(out_, event);
  out_.flush();
  MLO_CHECK(out_.good(), "cannot write the TensorBoard event file '", path_, "'");
}

}  // namespace io
}  // namespace mlo
