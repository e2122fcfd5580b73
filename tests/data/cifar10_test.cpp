// CIFAR-10 binary reader: values read back exactly from generated files; malformed files name
// the file and the problem.
#include "support/scratch.h"
#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cifar10_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using mlo::data::Cifar10;
using mlo::data::Cifar10Options;
using mlo::data::Split;

namespace {

struct TempDir : mlo_test::TempDir {
  TempDir() : mlo_test::TempDir("cifar_test") {}
};

// Writes `labels.size()` records: label byte, then 3072 pixel bytes p(record, byte) = (r*7 + b) %
// 256.
void write_batch(const fs::path& file, const std::vector<uint8_t>& labels, int first_record) {
  std::ofstream out(file, std::ios::binary);
  for (size_t r = 0; r < labels.size(); ++r) {
    out.put(static_cast<char>(labels[r]));
    for (int b = 0; b < 3072; ++b) out.put(static_cast<char>(((first_record + r) * 7 + b) % 256));
  }
}

uint8_t pixel(int64_t record, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>((record * 7 + c * 1024 + y * 32 + x) % 256);
}

// Five training batches of 3 records and a test batch of 2 in `dir`.
void write_dataset(const fs::path& dir) {
  fs::create_directories(dir);
  for (int i = 1; i <= 5; ++i) {
    const auto label = static_cast<uint8_t>(i);
    write_batch(dir / ("data_batch_" + std::to_string(i) + ".bin"), {label, 0, 9}, (i - 1) * 3);
  }
  write_batch(dir / "test_batch.bin", {3, 4}, 100);
}

}  // namespace

TEST_CASE("Cifar10: reads every batch exactly, channel-major", "[data][cifar10]") {
  TempDir tmp;
  write_dataset(tmp.path);
  Cifar10 train(Cifar10Options(tmp.path.string()));
  REQUIRE(train.size().value() == 15);
  REQUIRE(train.images().sizes() == torch::IntArrayRef({15, 3, 32, 32}));
  REQUIRE(train.images().scalar_type() == torch::kUInt8);
  REQUIRE(train.targets().scalar_type() == torch::kLong);
  std::vector<int64_t> expected_labels;
  for (int i = 1; i <= 5; ++i) expected_labels.insert(expected_labels.end(), {i, 0, 9});
  CHECK(torch::equal(train.targets(), torch::tensor(expected_labels)));

  // Every pixel, exactly (record r of the concatenation was written with index r).
  auto acc = train.images().accessor<uint8_t, 4>();
  int64_t mismatches = 0;
  for (int64_t r = 0; r < 15; ++r)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) mismatches += acc[r][c][y][x] != pixel(r, c, y, x);
  CHECK(mismatches == 0);

  auto example = train.get(4);
  CHECK(example.target.item<int64_t>() == 0);
  CHECK(torch::equal(example.data, train.images()[4]));
  CHECK_FALSE(train.is_synthetic());
  CHECK(std::string(train.name()) == "cifar10");
  CHECK(Cifar10::class_names().at(9) == "truck");

  Cifar10 test(Cifar10Options(tmp.path.string()).split(Split::kTest).to_float(true));
  REQUIRE(test.size().value() == 2);
  CHECK(torch::equal(test.targets(), torch::tensor(std::vector<int64_t>{3, 4})));
  CHECK(test.images().scalar_type() == torch::kFloat);
  // float images are byte / 255; tolerance 1e-7 (one float rounding).
  CHECK(std::abs(test.images()[1][2][3][4].item<float>() - pixel(101, 2, 3, 4) / 255.0) < 1e-7);
}

TEST_CASE("Cifar10: the cifar-10-batches-bin subfolder of the root is found", "[data][cifar10]") {
  TempDir tmp;
  write_dataset(tmp.path / "cifar-10-batches-bin");
  Cifar10 test(Cifar10Options(tmp.path.string()).split(Split::kTest));
  CHECK(test.size().value() == 2);
  CHECK(test.folder() == (tmp.path / "cifar-10-batches-bin").string());
}

TEST_CASE("Cifar10: works with torch::data's DataLoader", "[data][cifar10]") {
  TempDir tmp;
  write_dataset(tmp.path);
  auto dataset = Cifar10(Cifar10Options(tmp.path.string())).map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), /*batch_size=*/4);
  int64_t seen = 0;
  for (auto& batch : *loader) {
    CHECK(batch.data.size(1) == 3);
    seen += batch.target.size(0);
  }
  CHECK(seen == 15);
}

TEST_CASE("Cifar10: malformed files give an error naming the file", "[data][cifar10]") {
  TempDir tmp;
  write_dataset(tmp.path);
  const auto test_file = (tmp.path / "test_batch.bin").string();
  auto load_test = [&] { Cifar10(Cifar10Options(tmp.path.string()).split(Split::kTest)); };

  SECTION("missing file: says where to put which files and where to download them") {
    fs::remove(test_file);
    REQUIRE_THROWS_AS(load_test(), mlo::Error);
    REQUIRE_THROWS_WITH(
        load_test(), Contains("missing file '" + test_file + "'") && Contains(tmp.path.string()) &&
                         Contains("data_batch_5.bin") && Contains("CIFAR-10 binary version") &&
                         Contains("cifar-10-binary.tar.gz"));
  }
  SECTION("size not a multiple of the record") {
    std::ofstream(test_file, std::ios::binary | std::ios::app).put('x');
    REQUIRE_THROWS_WITH(load_test(), Contains(test_file) && Contains("6147 bytes") &&
                                         Contains("not a multiple of the 3073-byte record"));
  }
  SECTION("label out of range") {
    write_batch(test_file, {3, 10}, 0);
    REQUIRE_THROWS_WITH(load_test(), Contains(test_file) && Contains("record 1 has label 10"));
  }
  SECTION("empty file") {
    std::ofstream(test_file, std::ios::binary | std::ios::trunc);
    REQUIRE_THROWS_WITH(load_test(), Contains(test_file) && Contains("is empty"));
  }
}

}  // namespace cifar10_test
