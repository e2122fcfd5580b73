// TensorBoard event files, the parts a reader cannot show: the records' CRC-32C against the
// published check values, the framing read back (a record cut short by a crash is dropped, a
// damaged one is an error naming the file and offset), and what a resumed writer keeps. That
// TensorBoard itself reads the files, every tag, step and value, is tensorboard_reader_test.py.
#include "support/scratch.h"

#include <mlo/base/error.h>
#include <mlo/io/metrics.h>
#include <mlo/io/tensorboard.h>
#include <src/io/record_file.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

size_t file_size(const std::string& path) { return fs::file_size(path); }

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

  // One byte of the second record's data changed: its checksum names the file and its offset.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    mlo::io::write_record(out, "first");
    mlo::io::write_record(out, "second");
  }
  {
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(12 + 5 + 4 + 12 + 2);
    io.put('X');
  }
  CHECK_THROWS_WITH(mlo::io::read_records(path),
                    Contains(path) && Contains("byte 21") && Contains("data checksum"));
  CHECK(mlo::io::read_records((dir.path / "absent").string()).empty());
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
  // the file's version, the text, six scalar events
  CHECK(mlo::io::read_records(path).size() == 1 + 1 + 6);
  {
    mlo::io::TensorBoardWriter resumed(tb, 4);
    // kept: version, text at 0, steps 1..4; the resumed run writes its text at step 4
    CHECK(mlo::io::read_records(path).size() == 1 + 1 + 4);
    resumed.text(4, "run/config", "a: 2");
    resumed.scalars(5, {{"p/loss", 0.2}});
  }
  CHECK(mlo::io::read_records(path).size() == 1 + 1 + 4 + 1 + 1);
  {
    // resumed again from the same step: its own text replaces the previous resume's
    mlo::io::TensorBoardWriter again(tb, 4);
    CHECK(mlo::io::read_records(path).size() == 1 + 1 + 4);
  }
  {
    // a fresh run in the same folder starts an empty file (its version only)
    mlo::io::TensorBoardWriter fresh(tb);
    CHECK(mlo::io::read_records(path).size() == 1);
  }
}

TEST_CASE("MetricsWriter: TensorBoard tags", "[io][tensorboard]") {
  CHECK(mlo::io::tensorboard_tag("classifier", "loss") == "classifier/loss");
  CHECK(mlo::io::tensorboard_tag("validation", "valid/acc") == "valid/acc");
  CHECK(mlo::io::tensorboard_tag("validation", "memory/peak") == "validation/memory/peak");
  CHECK(mlo::io::tensorboard_tag("test", "balanced_acc") == "test/balanced_acc");
  mlo_test::TempDir dir("tensorboard_sink");
  {
    mlo::io::MetricsWriter writer(dir.path.string(), -1, /*tensorboard=*/true);
    writer.write(1, "classifier", {{"loss", 0.5}, {"lr", 0.1}});
    writer.text(0, "run/config", "x");
  }
  CHECK(mlo::io::read_records((dir.path / "tb" / "events.out.tfevents.mlo").string()).size() ==
        3);
  mlo_test::TempDir off("tensorboard_off");
  mlo::io::MetricsWriter writer(off.path.string());
  writer.write(1, "classifier", {{"loss", 0.5}});
  CHECK_FALSE(fs::exists(off.path / "tb"));
}
