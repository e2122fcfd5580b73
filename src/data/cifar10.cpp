#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace mlo {
namespace data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSubfolder = "cifar-10-batches-bin";

std::vector<std::string> file_names(Split split) {
  if (split == Split::kTest) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

// `root/cifar-10-batches-bin` when that folder exists (the archive's layout), else `root`.
std::string resolve_folder(const std::string& root) {
  std::error_code ec;
  const fs::path sub = fs::path(root) / kSubfolder;
  return fs::is_directory(sub, ec) ? sub.string() : root;
}

}  // namespace

const std::vector<std::string>& Cifar10::class_names() {
  static const std::vector<std::string> names = {
      "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  return names;
}

std::pair<torch::Tensor, torch::Tensor> Cifar10::read_batch(const std::string& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  MLO_CHECK(!ec, "CIFAR-10: cannot read '", path, "': ", ec.message());
  MLO_CHECK(bytes > 0, "CIFAR-10: '", path, "' is empty");
  MLO_CHECK(bytes % kRecordBytes == 0, "CIFAR-10: '", path, "' has ", bytes,
            " bytes, not a multiple of the ", kRecordBytes,
            "-byte record (1 label byte + 3072 pixel bytes); is it truncated, or not the "
            "binary version?");
  const int64_t n = static_cast<int64_t>(bytes / kRecordBytes);

  auto records = torch::empty({n, kRecordBytes}, torch::kUInt8);
  std::ifstream in(path, std::ios::binary);
  MLO_CHECK(in.good(), "CIFAR-10: cannot open '", path, "'");
  in.read(reinterpret_cast<char*>(records.data_ptr<uint8_t>()),
          static_cast<std::streamsize>(bytes));
  MLO_CHECK(in.gcount() == static_cast<std::streamsize>(bytes), "CIFAR-10: '", path, "': read ",
            in.gcount(), " of ", bytes, " bytes");

  auto labels = records.select(1, 0).to(torch::kLong);
  const auto bad = (labels >= kNumClasses).nonzero();
  if (bad.size(0) > 0) {
    const int64_t record = bad[0][0].item<int64_t>();
    MLO_CHECK(false, "CIFAR-10: '", path, "': record ", record, " has label ",
              labels[record].item<int64_t>(), ", labels must be 0..9");
  }
  auto images = records.narrow(1, 1, kRecordBytes - 1).reshape({n, 3, 32, 32}).contiguous();
  return {images, labels};
}

Cifar10::Cifar10(Cifar10Options options)
    : options_(std::move(options)), folder_(resolve_folder(options_.root())) {
  const auto names = file_names(options_.split());
  std::vector<torch::Tensor> images, labels;
  for (const auto& name : names) {
    const std::string path = (fs::path(folder_) / name).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      std::string expected;
      for (const auto& n : file_names(Split::kTrain)) expected += n + " ";
      expected += "test_batch.bin";
      MLO_CHECK(false, "CIFAR-10: missing file '", path,
                "'. Download the CIFAR-10 binary version (", kCifar10Url,
                ") and extract it into '", options_.root(),
                "' (its cifar-10-batches-bin folder is found there) or put the files directly "
                "in that folder: ",
                expected);
    }
    auto batch = read_batch(path);
    images.push_back(std::move(batch.first));
    labels.push_back(std::move(batch.second));
  }
  images_ = torch::cat(images);
  targets_ = torch::cat(labels);
  if (options_.to_float()) images_ = images_.to(torch::kFloat).div_(255);
  spdlog::debug("cifar10 {}: {} images from '{}'", to_string(options_.split()), images_.size(0),
                folder_);
}

torch::data::Example<> Cifar10::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  MLO_CHECK(i < images_.size(0), "CIFAR-10: index ", i, " out of range (", images_.size(0),
            " images)");
  return {images_[i], targets_[i]};
}

torch::optional<size_t> Cifar10::size() const { return static_cast<size_t>(images_.size(0)); }

}  // namespace data
}  // namespace mlo
