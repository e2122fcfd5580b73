#include <mlo/data/registry.h>

#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>
#include <mlo/data/fashion_mnist.h>
#include <mlo/data/synthetic.h>

#include <filesystem>
#include <mlo/base/registry.h>
#include <system_error>
#include <utility>

namespace mlo {
namespace data {
namespace {

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find it constructed whatever the initialization order.
Registry<DatasetEntry>& registry() {
  static Registry<DatasetEntry> entries(
      "dataset", "a program registers its own with MLO_REGISTER_DATASET, mlo/data/registry.h");
  return entries;
}

constexpr const char* kCifarRoot = "data/cifar-10-batches-bin";
constexpr const char* kFashionDownloadRoot = "data/fashion-mnist";

// The datasets' official addresses and published MD5s (CIFAR-10: the dataset's page; Fashion-MNIST:
// the table in its repository's README).
constexpr const char* kCifarMd5 = "c32a1d4ab5d03f1284b67883e8d87530";
constexpr const char* kFashionUrl = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/";

DownloadSource fashion_mnist_source() {
  DownloadSource source;
  const std::pair<const char*, const char*> files[] = {
      {"train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"},
      {"train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"},
      {"t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"},
      {"t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"}};
  for (const auto& file : files) {
    source.files.push_back({std::string(kFashionUrl) + file.first, file.second, false});
    source.expected.emplace_back(file.first);
  }
  return source;
}

DownloadSource cifar10_source() {
  DownloadSource source;
  source.files.push_back({kCifar10Url, kCifarMd5, /*unpack=*/true});
  source.folder = "cifar-10-batches-bin";
  for (int i = 1; i <= 5; ++i) {
    source.expected.push_back("data_batch_" + std::to_string(i) + ".bin");
  }
  source.expected.emplace_back("test_batch.bin");
  return source;
}

DatasetEntry fashion_mnist() {
  DatasetEntry e;
  e.default_root = FashionMnistOptions::kDefaultRoot;
  // The reader takes the files gzip-compressed or not.
  e.present = [](const std::string& root) {
    std::error_code ec;
    return std::filesystem::exists(root + "/train-images-idx3-ubyte.gz", ec) ||
           std::filesystem::exists(root + "/train-images-idx3-ubyte", ec);
  };
  e.load = [](const DatasetRequest& r) {
    FashionMnist train(FashionMnistOptions(r.root).split(Split::kTrain));
    FashionMnist test(FashionMnistOptions(r.root).split(Split::kTest));
    return ImageDataset{train.images(), train.targets(), test.images(), test.targets(),
                        FashionMnist::class_names(), "Fashion-MNIST (" + r.root + ")", false};
  };
  e.transform = [](bool train) { return TransformOptions::fashion_mnist(train); };
  e.class_names = FashionMnist::class_names();
  e.source = fashion_mnist_source();
  e.download_root = kFashionDownloadRoot;
  e.how_to_get = "on Debian, apt-get install dataset-fashion-mnist (into " +
                 std::string(FashionMnistOptions::kDefaultRoot) + ")";
  return e;
}

DatasetEntry cifar10() {
  DatasetEntry e;
  e.default_root = kCifarRoot;
  // The binary archive unpacks into cifar-10-batches-bin/; either folder may be given.
  e.present = [](const std::string& root) {
    std::error_code ec;
    return std::filesystem::exists(root + "/data_batch_1.bin", ec) ||
           std::filesystem::exists(root + "/cifar-10-batches-bin/data_batch_1.bin", ec);
  };
  e.load = [](const DatasetRequest& r) {
    Cifar10 train(Cifar10Options(r.root).split(Split::kTrain));
    Cifar10 test(Cifar10Options(r.root).split(Split::kTest));
    return ImageDataset{train.images(), train.targets(), test.images(), test.targets(),
                        Cifar10::class_names(), "CIFAR-10 (" + train.folder() + ")", false};
  };
  e.transform = [](bool train) { return TransformOptions::cifar10(train); };
  e.class_names = Cifar10::class_names();
  e.source = cifar10_source();
  e.how_to_get = std::string("by hand: download ") + kCifar10Url + " and unpack it there";
  return e;
}

DatasetEntry synthetic() {
  DatasetEntry e;
  e.load = [](const DatasetRequest& r) {
    constexpr int64_t kClasses = 10;
    SyntheticCifar train(SyntheticOptions(r.synthetic_per_class * kClasses).seed(r.seed));
    // The test split: another sample (seed + 1000) of the same task (the training prototypes).
    SyntheticCifar test(SyntheticOptions(r.synthetic_test_per_class * kClasses)
                            .seed(r.seed + 1000)
                            .prototype_seed(r.seed));
    ImageDataset d{train.images(), train.targets(), test.images(), test.targets(), {},
                   "synthetic CIFAR-shaped data (not real data)", true};
    for (int64_t c = 0; c < kClasses; ++c) d.class_names.push_back("class" + std::to_string(c));
    return d;
  };
  e.transform = [](bool train) { return TransformOptions::cifar10(train); };
  for (int64_t c = 0; c < 10; ++c) e.class_names.push_back("class" + std::to_string(c));
  return e;
}

// The built-in datasets, each a type of its own for the registry's rule.
struct FashionMnistDataset {
  static constexpr const char* kName = "fashion_mnist";
  static DatasetEntry entry() { return fashion_mnist(); }
};
struct Cifar10Dataset {
  static constexpr const char* kName = "cifar10";
  static DatasetEntry entry() { return cifar10(); }
};
struct SyntheticDataset {
  static constexpr const char* kName = "synthetic";
  static DatasetEntry entry() { return synthetic(); }
};

}  // namespace

MLO_REGISTER_DATASET(FashionMnistDataset);
MLO_REGISTER_DATASET(Cifar10Dataset);
MLO_REGISTER_DATASET(SyntheticDataset);

bool register_dataset(const std::string& name, std::type_index type, DatasetEntry entry,
                      const std::string& where) {
  MLO_CHECK(entry.load && entry.transform, "register_dataset: dataset '", name,
            "' needs a loader and a transform (", where, ")");
  return registry().add(name, type, std::move(entry), where);
}

bool register_dataset(const std::string& name, DatasetEntry entry) {
  MLO_CHECK(entry.load && entry.transform, "register_dataset: dataset '", name,
            "' needs a loader and a transform");
  return registry().add(name, std::move(entry), "register_dataset(\"" + name + "\", ...)");
}

std::vector<std::string> dataset_names() { return registry().names(); }

const DatasetEntry& dataset_entry(const std::string& name) { return registry().at(name); }

std::string dataset_root(const std::string& name, const std::string& root) {
  if (!root.empty()) return root;
  const DatasetEntry& entry = dataset_entry(name);
  if (!entry.download_root.empty() && entry.present && !entry.present(entry.default_root) &&
      entry.present(entry.download_root)) {
    return entry.download_root;
  }
  return entry.default_root;
}

bool dataset_present(const std::string& name, const std::string& root) {
  const DatasetEntry& entry = dataset_entry(name);
  return !entry.present || entry.present(dataset_root(name, root));
}

std::string prepare_dataset(const std::string& name, const std::string& root, bool download,
                            const DownloadOptions& options) {
  const DatasetEntry& entry = dataset_entry(name);
  const std::string folder = dataset_root(name, root);
  if (!entry.present || entry.present(folder)) return folder;
  const std::string target =
      root.empty() && !entry.download_root.empty() ? entry.download_root : folder;
  std::string files;
  for (const auto& file : entry.source.expected) files += (files.empty() ? "" : " ") + file;
  if (!download) {
    std::string message = "dataset '" + name + "': its files are not in '" + folder + "'";
    if (target != folder) message += " (nor in '" + target + "')";
    if (!files.empty()) message += " (expected: " + files + ")";
    if (!entry.source.files.empty()) {
      message += ". To fetch them into '" + target +
                 "', set data.download: true in the config (or add --set data.download=true to "
                 "mlo run)";
    }
    if (!entry.how_to_get.empty()) message += "; " + entry.how_to_get;
    message += "; or set data.root to the folder that holds them";
    throw Error(message);
  }
  MLO_CHECK(!entry.source.files.empty(), "dataset '", name, "' cannot be downloaded (its entry ",
            "publishes no files), and its files are not in '", folder, "'");
  data::download(entry.source, target, options);
  MLO_CHECK(entry.present(target), "dataset '", name, "': downloaded into '", target,
            "', but its files are still not found there");
  return target;
}

ImageDataset load_dataset(const std::string& name, DatasetRequest request) {
  request.root = dataset_root(name, request.root);
  return dataset_entry(name).load(request);
}

TransformOptions dataset_transform(const std::string& name, bool train) {
  return dataset_entry(name).transform(train);
}

}  // namespace data
}  // namespace mlo
