#include <mlo/data/registry.h>

#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>
#include <mlo/data/fashion_mnist.h>
#include <mlo/data/synthetic.h>

#include <filesystem>
#include <map>
#include <utility>

namespace mlo {
namespace data {
namespace {

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find the map constructed whatever the initialization order.
std::map<std::string, DatasetEntry>& registry() {
  static std::map<std::string, DatasetEntry> entries;
  return entries;
}

constexpr const char* kCifarRoot = "data/cifar-10-batches-bin";

DatasetEntry fashion_mnist() {
  DatasetEntry e;
  e.default_root = FashionMnistOptions::kDefaultRoot;
  e.present = [](const std::string& root) {
    return std::filesystem::exists(root + "/train-images-idx3-ubyte.gz");
  };
  e.load = [](const DatasetRequest& r) {
    FashionMnist train(FashionMnistOptions(r.root).split(Split::kTrain));
    FashionMnist test(FashionMnistOptions(r.root).split(Split::kTest));
    return ImageDataset{train.images(), train.targets(), test.images(), test.targets(),
                        FashionMnist::class_names(), "Fashion-MNIST (" + r.root + ")", false};
  };
  e.transform = [](bool train) { return TransformOptions::fashion_mnist(train); };
  e.class_names = FashionMnist::class_names();
  return e;
}

DatasetEntry cifar10() {
  DatasetEntry e;
  e.default_root = kCifarRoot;
  // The binary archive unpacks into cifar-10-batches-bin/; either folder may be given.
  e.present = [](const std::string& root) {
    return std::filesystem::exists(root + "/data_batch_1.bin") ||
           std::filesystem::exists(root + "/cifar-10-batches-bin/data_batch_1.bin");
  };
  e.load = [](const DatasetRequest& r) {
    Cifar10 train(Cifar10Options(r.root).split(Split::kTrain));
    Cifar10 test(Cifar10Options(r.root).split(Split::kTest));
    return ImageDataset{train.images(), train.targets(), test.images(), test.targets(),
                        Cifar10::class_names(), "CIFAR-10 (" + train.folder() + ")", false};
  };
  e.transform = [](bool train) { return TransformOptions::cifar10(train); };
  e.class_names = Cifar10::class_names();
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

const bool kBuiltIn = register_dataset("fashion_mnist", fashion_mnist()) &&
                      register_dataset("cifar10", cifar10()) &&
                      register_dataset("synthetic", synthetic());

}  // namespace

bool register_dataset(const std::string& name, DatasetEntry entry) {
  MLO_CHECK(!name.empty(), "register_dataset: a dataset needs a name");
  MLO_CHECK(entry.load && entry.transform, "register_dataset: dataset '", name,
            "' needs a loader and a transform");
  registry()[name] = std::move(entry);
  return true;
}

std::vector<std::string> dataset_names() {
  (void)kBuiltIn;
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

const DatasetEntry& dataset_entry(const std::string& name) {
  const auto found = registry().find(name);
  if (found == registry().end()) {
    std::string names;
    for (const auto& known : dataset_names()) names += (names.empty() ? "" : ", ") + known;
    throw Error("unknown dataset '" + name + "'; registered datasets: " + names);
  }
  return found->second;
}

std::string dataset_root(const std::string& name, const std::string& root) {
  return root.empty() ? dataset_entry(name).default_root : root;
}

bool dataset_present(const std::string& name, const std::string& root) {
  const DatasetEntry& entry = dataset_entry(name);
  return !entry.present || entry.present(dataset_root(name, root));
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
