#include <mlo/base/error.h>
#include <mlo/data/fashion_mnist.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

namespace mlo {
namespace data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kRows = 28;
constexpr int64_t kCols = 28;
constexpr const char* kFashionDownload = "https://github.com/zalandoresearch/fashion-mnist";

// The whole decompressed content of a gzip file (zlib also reads uncompressed files as they are).
std::vector<uint8_t> read_gzip(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), &gzclose);
  MLO_CHECK(file != nullptr, "Fashion-MNIST: cannot open '", path, "'");
  std::vector<uint8_t> content;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    const int got = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got <= 0) break;
    content.insert(content.end(), chunk.begin(), chunk.begin() + got);
  }
  // NOTE: zlib reports a stream cut short as Z_BUF_ERROR ("unexpected end of file") without
  // failing gzread, so the error state is checked once the reading stops.
  int code = Z_OK;
  const char* message = gzerror(file.get(), &code);
  MLO_CHECK(code == Z_OK, "Fashion-MNIST: '", path, "' is corrupt or truncated (zlib: ", message,
            ")");
  return content;
}

int32_t big_endian(const std::vector<uint8_t>& bytes, size_t offset) {
  return static_cast<int32_t>((uint32_t(bytes[offset]) << 24) |
                              (uint32_t(bytes[offset + 1]) << 16) |
                              (uint32_t(bytes[offset + 2]) << 8) | uint32_t(bytes[offset + 3]));
}

// Checks the header (magic and `dims` sizes) and the payload length; returns the sizes.
std::vector<int64_t> check_header(const std::vector<uint8_t>& bytes, const std::string& path,
                                  int32_t magic, size_t dims, const char* what) {
  const size_t header = 4 * (1 + dims);
  MLO_CHECK(bytes.size() >= header, "Fashion-MNIST: '", path, "' is truncated: ", bytes.size(),
            " bytes, shorter than the ", header, "-byte IDX header");
  const int32_t found = big_endian(bytes, 0);
  MLO_CHECK(found == magic, "Fashion-MNIST: '", path, "' has magic number ", found, ", expected ",
            magic, " (IDX ", what, " file)");
  std::vector<int64_t> sizes;
  int64_t payload = 1;
  for (size_t d = 0; d < dims; ++d) {
    sizes.push_back(big_endian(bytes, 4 * (1 + d)));
    MLO_CHECK(sizes.back() >= 0, "Fashion-MNIST: '", path, "' has negative dimension ",
              sizes.back());
    payload *= sizes.back();
  }
  const auto expected = static_cast<size_t>(payload) + header;
  MLO_CHECK(bytes.size() >= expected, "Fashion-MNIST: '", path, "' is truncated: ", bytes.size(),
            " bytes after decompression, the header announces ", expected);
  MLO_CHECK(bytes.size() == expected, "Fashion-MNIST: '", path, "' has ", bytes.size() - expected,
            " bytes of trailing data after the ", expected, " the header announces");
  return sizes;
}

torch::Tensor payload_tensor(const std::vector<uint8_t>& bytes, size_t header,
                             std::vector<int64_t> sizes) {
  auto t = torch::empty(sizes, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data() + header, bytes.size() - header);
  return t;
}

// `name.gz` in `root`, or the uncompressed `name` if only that exists.
std::string find_file(const std::string& root, const std::string& name) {
  std::error_code ec;
  const fs::path gz = fs::path(root) / (name + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  const fs::path plain = fs::path(root) / name;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  MLO_CHECK(false, "Fashion-MNIST: missing file '", gz.string(),
            "'. Install Debian's dataset-fashion-mnist package (it puts the files in ",
            FashionMnistOptions::kDefaultRoot, ") or download them from ", kFashionDownload,
            " into '", root,
            "': train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz "
            "t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz");
  return {};
}

}  // namespace

const std::vector<std::string>& FashionMnist::class_names() {
  static const std::vector<std::string> names = {"t-shirt/top", "trouser",   "pullover", "dress",
                                                 "coat",        "sandal",    "shirt",    "sneaker",
                                                 "bag",         "ankle boot"};
  return names;
}

torch::Tensor FashionMnist::read_images(const std::string& path) {
  const auto bytes = read_gzip(path);
  const auto sizes = check_header(bytes, path, kImagesMagic, 3, "images");
  MLO_CHECK(sizes[1] == kRows && sizes[2] == kCols, "Fashion-MNIST: '", path, "' has ", sizes[1],
            "x", sizes[2], " images, expected ", kRows, "x", kCols);
  return payload_tensor(bytes, 16, {sizes[0], 1, kRows, kCols});
}

torch::Tensor FashionMnist::read_labels(const std::string& path) {
  const auto bytes = read_gzip(path);
  const auto sizes = check_header(bytes, path, kLabelsMagic, 1, "labels");
  auto labels = payload_tensor(bytes, 8, {sizes[0]}).to(torch::kLong);
  const auto bad = (labels >= kNumClasses).nonzero();
  if (bad.size(0) > 0) {
    const int64_t i = bad[0][0].item<int64_t>();
    MLO_CHECK(false, "Fashion-MNIST: '", path, "': label ", i, " is ", labels[i].item<int64_t>(),
              ", labels must be 0..9");
  }
  return labels;
}

FashionMnist::FashionMnist(FashionMnistOptions options) : options_(std::move(options)) {
  const std::string prefix = options_.split() == Split::kTrain ? "train" : "t10k";
  const auto images_path = find_file(options_.root(), prefix + "-images-idx3-ubyte");
  const auto labels_path = find_file(options_.root(), prefix + "-labels-idx1-ubyte");
  images_ = read_images(images_path);
  targets_ = read_labels(labels_path);
  MLO_CHECK(images_.size(0) == targets_.size(0), "Fashion-MNIST: '", images_path, "' has ",
            images_.size(0), " images but '", labels_path, "' has ", targets_.size(0), " labels");
  if (options_.to_float()) images_ = images_.to(torch::kFloat).div_(255);
  spdlog::debug("fashion-mnist {}: {} images from '{}'", to_string(options_.split()),
                images_.size(0), options_.root());
}

torch::data::Example<> FashionMnist::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  MLO_CHECK(i < images_.size(0), "Fashion-MNIST: index ", i, " out of range (", images_.size(0),
            " images)");
  return {images_[i], targets_[i]};
}

torch::optional<size_t> FashionMnist::size() const { return static_cast<size_t>(images_.size(0)); }

}  // namespace data
}  // namespace mlo
