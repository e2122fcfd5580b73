// TensorBoard event files, the parts a reader cannot show: the records' CRC-32C against the
// published check values, the framing read back (a record cut short by a crash, or damaged,
// ends what is read, naming the offset), and which steps a resumed writer keeps. That
// TensorBoard itself reads the files, every tag, step and value, is tensorboard_reader_test.py.
#include "support/scratch.h"
#include "support/text_files.h"

#include <mlo/base/error.h>
#include <mlo/io/metrics.h>
#include <mlo/io/tensorboard.h>
#include <src/io/record_file.h>

#include "tensorboard_event.pb.h"  // generated from src/io/tensorboard_event.proto

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tensorboard_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

size_t file_size(const std::string& path) { return fs::file_size(path); }

// The events of an event file as "step:kind" ("0:version", "3:scalar", "0:text"), in order.
std::vector<std::string> events(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& record : mlo::io::read_records(path)) {
    mlo::io::tensorboard::Event event;
    REQUIRE(event.ParseFromString(record));
    const bool text = event.has_summary() && event.summary().value_size() > 0 &&
                      event.summary().value(0).has_tensor();
    out.push_back(std::to_string(event.step()) + ":" +
                  (event.has_file_version() ? "version" : text ? "text" : "scalar"));
  }
  return out;
}

using Events = std::vector<std::string>;

}  // namespace

TEST_CASE("crc32c matches the published check values", "[io][tensorboard]") {
  // The CRC catalogue's check value of CRC-32C, and the iSCSI test vectors of RFC 3720 (B.4).
  const std::string digits = "123456789";
  CHECK(mlo::io::crc32c(digits.data(), digits.size()) == 0xE3069283u);
  std::string bytes(32, '\0');
  CHECK(mlo::io::crc32c(bytes.data(), bytes.size()) == 0x8A9136AAu);
  bytes.assign(32, '\xff');
  CHECK(mlo::io::crc32c(bytes.data(), bytes.size()) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<char>(i);
  CHECK(mlo::io::crc32c(bytes.data(), bytes.size()) == 0x46DD794Eu);
  // masked: rotate right by 15, add 0xa282ead8
  const uint32_t crc = 0xE3069283u;
  CHECK(mlo::io::masked_crc32c(digits.data(), digits.size()) ==
        static_cast<uint32_t>(((crc >> 15) | (crc << 17)) + 0xa282ead8u));
}

TEST_CASE("records: read back; a record cut short is dropped; a damaged one is refused",
          "[io][tensorboard]") {
  mlo_test::TempDir dir("tensorboard_records");
  const std::string path = (dir.path / "records").string();
  {
    std::ofstream out(path, std::ios::binary);
    mlo::io::write_record(out, "first");
    mlo::io::write_record(out, std::string("with\0zero", 9));
    mlo::io::write_record(out, "");
  }
  // 12 bytes of header and 4 of footer around each record's data
  CHECK(file_size(path) == (12 + 5 + 4) + (12 + 9 + 4) + (12 + 0 + 4));
  auto records = mlo::io::read_records(path);
  REQUIRE(records.size() == 3);
  CHECK(records[0] == "first");
  CHECK(records[1] == std::string("with\0zero", 9));
  CHECK(records[2].empty());

  // A crash in the middle of the last record: the records before it are read.
  fs::resize_file(path, file_size(path) - 2);
  CHECK(mlo::io::read_records(path).size() == 2);
  fs::resize_file(path, 12 + 5 + 4 + 7);  // the second record's header cut short
  CHECK(mlo::io::read_records(path).size() == 1);

  // One byte of the second record's data changed: reading stops before it, naming its offset.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    mlo::io::write_record(out, "first");
    mlo::io::write_record(out, "second");
    mlo::io::write_record(out, "third");
  }
  {
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(12 + 5 + 4 + 12 + 2);
    io.put('X');
  }
  std::string damage;
  CHECK(mlo::io::read_records(path, &damage) == std::vector<std::string>{"first"});
  CHECK(damage == "the record at byte 21 is damaged (data checksum)");
  // A zero-filled tail (a power loss after the size grew): the length's checksum fails.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    mlo::io::write_record(out, "first");
    out << std::string(40, '\0');
  }
  CHECK(mlo::io::read_records(path, &damage).size() == 1);
  CHECK(damage == "the record at byte 21 is damaged (length checksum)");
  CHECK(mlo::io::read_records((dir.path / "absent").string(), &damage).empty());
  CHECK(damage.empty());
}

TEST_CASE("TensorBoardWriter: a resumed writer keeps the events up to the saved step",
          "[io][tensorboard]") {
  mlo_test::TempDir dir("tensorboard_resume");
  const std::string tb = (dir.path / "tb").string();
  std::string path;
  {
    mlo::io::TensorBoardWriter writer(tb);
    path = writer.path();
    writer.text(0, "run/config", "a: 1");
    for (int step = 1; step <= 6; ++step) writer.scalars(step, {{"p/loss", 1.0 / step}});
  }
  CHECK(events(path) ==
        Events{"0:version", "0:text", "1:scalar", "2:scalar", "3:scalar", "4:scalar", "5:scalar",
               "6:scalar"});
  {
    // resumed from a state of step 4: 5 and 6 go; the resumed run writes its text at 4
    mlo::io::TensorBoardWriter resumed(tb, 4);
    CHECK(events(path) ==
          Events{"0:version", "0:text", "1:scalar", "2:scalar", "3:scalar", "4:scalar"});
    resumed.text(4, "run/config", "a: 2");
    resumed.scalars(5, {{"p/loss", 0.2}});
  }
  CHECK(events(path) == Events{"0:version", "0:text", "1:scalar", "2:scalar", "3:scalar",
                               "4:scalar", "4:text", "5:scalar"});
  {
    // resumed again from the same step: the previous resume's text at 4 goes too
    mlo::io::TensorBoardWriter again(tb, 4);
    CHECK(events(path) ==
          Events{"0:version", "0:text", "1:scalar", "2:scalar", "3:scalar", "4:scalar"});
  }
  // no temporary file is left where TensorBoard would read it
  for (const auto& entry : fs::directory_iterator(tb)) {
    CHECK(entry.path().filename() == "events.out.tfevents.mlo");
  }
  {
    // a damaged record (a power loss): what precedes it is kept, the rest dropped
    // (a byte of the last record's checksum, flipped: writing a fixed byte would change nothing
    // when the checksum, which covers the event's wall time, happens to hold it)
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    io.seekg(-3, std::ios::end);
    const char byte = static_cast<char>(io.get());
    io.seekp(-3, std::ios::end);
    io.put(static_cast<char>(~byte));
  }
  const std::string before_damage = mlo_test::read_text(path);
  {
    mlo::io::TensorBoardWriter damaged(tb, 10);
    CHECK(events(path) == Events{"0:version", "0:text", "1:scalar", "2:scalar", "3:scalar"});
  }
  {
    // the damaged file is kept as it was, under a name without "tfevents" (TensorBoard would
    // read it and show its steps twice)
    std::vector<fs::path> aside;
    for (const auto& entry : fs::directory_iterator(tb)) {
      if (entry.path().filename().string().rfind("events.damaged-", 0) == 0) {
        aside.push_back(entry.path());
      }
      const std::string name = entry.path().filename().string();
      CHECK((name == "events.out.tfevents.mlo" || name.find("tfevents") == std::string::npos));
    }
    REQUIRE(aside.size() == 1);
    CHECK(mlo_test::read_text(aside[0]) == before_damage);
    fs::remove(aside[0]);
  }
  {
    // a fresh run in the same folder starts an empty file (its version only)
    mlo::io::TensorBoardWriter fresh(tb);
    CHECK(events(path) == Events{"0:version"});
  }
  fs::remove(path);
  {
    // resumed without a file (TensorBoard was off before): a new one
    mlo::io::TensorBoardWriter missing(tb, 3);
    missing.scalars(4, {{std::string("p/\xff\xfe") + "x", 1.0}});
  }
  const auto records = mlo::io::read_records(path);
  REQUIRE(records.size() == 2);
  mlo::io::tensorboard::Event event;
  REQUIRE(event.ParseFromString(records[1]));  // a tag that was not UTF-8 still parses
  CHECK(event.summary().value(0).tag() == "p/\xEF\xBF\xBD\xEF\xBF\xBDx");
  CHECK(event.summary().value(0).simple_value() == 1.0f);
}

TEST_CASE("TensorBoardWriter: a run's records under their tags", "[io][tensorboard]") {
  CHECK(mlo::io::tensorboard_tag("classifier", "loss") == "classifier/loss");
  CHECK(mlo::io::tensorboard_tag("validation", "valid/acc") == "valid/acc");
  CHECK(mlo::io::tensorboard_tag("validation", "memory/peak") == "validation/memory/peak");
  CHECK(mlo::io::tensorboard_tag("test", "balanced_acc") == "test/balanced_acc");
  mlo_test::TempDir dir("tensorboard_sink");
  {
    mlo::io::TensorBoardWriter writer((dir.path / "tb").string());
    writer.write(1, "classifier", {{"loss", 0.5}, {"lr", 0.1}});
    writer.text(0, "run/config", "x");
  }
  // (the file version, one event of two scalars, one text)
  const auto records =
      mlo::io::read_records((dir.path / "tb" / "events.out.tfevents.mlo").string());
  REQUIRE(records.size() == 3);
  mlo::io::tensorboard::Event event;
  REQUIRE(event.ParseFromString(records[1]));
  REQUIRE(event.summary().value_size() == 2);
  CHECK(event.step() == 1);
  CHECK(event.summary().value(0).tag() == "classifier/loss");
  CHECK(event.summary().value(0).simple_value() == 0.5f);
  CHECK(event.summary().value(1).tag() == "classifier/lr");
}

}  // namespace tensorboard_test
