// Fashion-MNIST IDX reader: generated gzip files read back exactly; malformed files name the file;
// the real files of Debian's dataset-fashion-mnist package when installed.
#include "support/scratch.h"
#include <mlo/base/error.h>
#include <mlo/data/fashion_mnist.h>

#include <torch/torch.h>
#include <zlib.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fashion_mnist_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using mlo::data::FashionMnist;
using mlo::data::FashionMnistOptions;
using mlo::data::Split;

namespace {

struct TempDir : mlo_test::TempDir {
  TempDir() : mlo_test::TempDir("fmnist_test") {}
};

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows = 28, uint32_t cols = 28,
                                uint32_t magic = 2051) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  put_be32(out, n);
  put_be32(out, rows);
  put_be32(out, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i)
    out.push_back(static_cast<uint8_t>((i * 13) % 256));
  return out;
}

std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 2049) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_gz(const fs::path& file, const std::vector<uint8_t>& bytes) {
  gzFile gz = gzopen(file.string().c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(gz) == Z_OK);
}

void write_dataset(const fs::path& dir) {
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_images(5));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_labels({9, 0, 3, 3, 7}));
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_images(2));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_labels({1, 2}));
}

}  // namespace

TEST_CASE("FashionMnist: reads generated gzip IDX files exactly", "[data][fashion_mnist]") {
  TempDir tmp;
  write_dataset(tmp.path);
  FashionMnist train(FashionMnistOptions(tmp.path.string()));
  REQUIRE(train.images().sizes() == torch::IntArrayRef({5, 1, 28, 28}));
  REQUIRE(train.images().scalar_type() == torch::kUInt8);
  CHECK(torch::equal(train.targets(), torch::tensor(std::vector<int64_t>{9, 0, 3, 3, 7})));
  const auto flat = train.images().reshape({-1});
  const auto expected =
      torch::arange(5 * 784, torch::kLong).mul(13).remainder(256).to(torch::kUInt8);
  CHECK(torch::equal(flat, expected));
  CHECK(std::string(train.name()) == "fashion-mnist");
  CHECK_FALSE(train.is_synthetic());

  FashionMnist test(FashionMnistOptions(tmp.path.string()).split(Split::kTest).to_float(true));
  REQUIRE(test.size().value() == 2);
  CHECK(test.get(1).target.item<int64_t>() == 2);
  // float = byte / 255, tolerance 1e-7.
  CHECK(std::abs(test.images()[1][0][0][5].item<float>() - ((784 + 5) * 13 % 256) / 255.0) < 1e-7);
}

TEST_CASE("FashionMnist: uncompressed IDX files are read too", "[data][fashion_mnist]") {
  TempDir tmp;
  write_dataset(tmp.path);
  fs::remove(tmp.path / "t10k-labels-idx1-ubyte.gz");
  const auto labels = idx_labels({4, 8});
  std::ofstream(tmp.path / "t10k-labels-idx1-ubyte", std::ios::binary)
      .write(reinterpret_cast<const char*>(labels.data()),
             static_cast<std::streamsize>(labels.size()));
  FashionMnist test(FashionMnistOptions(tmp.path.string()).split(Split::kTest));
  CHECK(torch::equal(test.targets(), torch::tensor(std::vector<int64_t>{4, 8})));
}

TEST_CASE("FashionMnist: malformed files give an error naming the file", "[data][fashion_mnist]") {
  TempDir tmp;
  write_dataset(tmp.path);
  const auto images = (tmp.path / "t10k-images-idx3-ubyte.gz").string();
  const auto labels = (tmp.path / "t10k-labels-idx1-ubyte.gz").string();
  auto load = [&] { FashionMnist(FashionMnistOptions(tmp.path.string()).split(Split::kTest)); };

  SECTION("missing file: says where to put the files") {
    fs::remove(labels);
    REQUIRE_THROWS_AS(load(), mlo::Error);
    REQUIRE_THROWS_WITH(load(), Contains("missing file '" + labels + "'") &&
                                    Contains("dataset-fashion-mnist") &&
                                    Contains("/usr/share/datasets/fashion-mnist") &&
                                    Contains("t10k-images-idx3-ubyte.gz"));
  }
  SECTION("bad magic number") {
    write_gz(images, idx_images(2, 28, 28, /*magic=*/2049));
    REQUIRE_THROWS_WITH(load(), Contains(images) && Contains("magic number 2049, expected 2051"));
    write_gz(labels, idx_labels({1, 2}, /*magic=*/2051));
    write_gz(images, idx_images(2));
    REQUIRE_THROWS_WITH(load(), Contains(labels) && Contains("magic number 2051, expected 2049"));
  }
  SECTION("wrong image dimensions") {
    write_gz(images, idx_images(2, 32, 32));
    REQUIRE_THROWS_WITH(load(), Contains(images) && Contains("32x32 images, expected 28x28"));
  }
  SECTION("image and label counts differ") {
    write_gz(labels, idx_labels({1, 2, 3}));
    REQUIRE_THROWS_WITH(load(), Contains(images) && Contains(labels) && Contains("2 images") &&
                                    Contains("3 labels"));
  }
  SECTION("label out of range") {
    write_gz(labels, idx_labels({1, 10}));
    REQUIRE_THROWS_WITH(load(), Contains(labels) && Contains("label 1 is 10"));
  }
  SECTION("payload shorter than the header announces") {
    auto bytes = idx_images(2);
    bytes.resize(bytes.size() - 100);
    write_gz(images, bytes);
    REQUIRE_THROWS_WITH(load(), Contains(images) && Contains("is truncated"));
  }
  SECTION("gzip stream cut short") {
    std::ifstream in(images, std::ios::binary);
    std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    for (size_t keep : {gz.size() - 4, gz.size() / 2, size_t{12}}) {
      std::ofstream(images, std::ios::binary | std::ios::trunc)
          .write(gz.data(), static_cast<std::streamsize>(keep));
      INFO("kept " << keep << " of " << gz.size() << " compressed bytes");
      REQUIRE_THROWS_WITH(load(),
                          Contains(images) && (Contains("truncated") || Contains("corrupt")));
    }
  }
}

TEST_CASE("FashionMnist: the real files of dataset-fashion-mnist", "[data][fashion_mnist][real]") {
  const std::string root = FashionMnistOptions::kDefaultRoot;
  if (!fs::is_directory(root)) {
    WARN("skipped: " << root << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  FashionMnist train;
  FashionMnist test(FashionMnistOptions().split(Split::kTest));
  CHECK(train.images().sizes() == torch::IntArrayRef({60000, 1, 28, 28}));
  CHECK(test.images().sizes() == torch::IntArrayRef({10000, 1, 28, 28}));
  // The official sets are balanced: 6000 and 1000 per class.
  CHECK(torch::equal(torch::bincount(train.targets()), torch::full({10}, 6000, torch::kLong)));
  CHECK(torch::equal(torch::bincount(test.targets()), torch::full({10}, 1000, torch::kLong)));
  // Documented normalization statistics: mean 0.2860, std 0.3530 (tolerance 5e-4).
  const auto pixels = train.images().to(torch::kDouble).div(255);
  CHECK(std::abs(pixels.mean().item<double>() - 0.2860) < 5e-4);
  CHECK(std::abs(pixels.std().item<double>() - 0.3530) < 5e-4);
}

}  // namespace fashion_mnist_test
