// The dataset registry: built-in entries, seeded generated data, default folders, a dataset a
// program registers, unknown names.
#include "support/scratch.h"
#include <mlo/base/error.h>
#include <mlo/data/registry.h>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

namespace dataset_registry_test {

using Catch::Contains;

TEST_CASE("Dataset registry: the built-in datasets, their folders and generated data",
          "[data]") {
  const auto names = mlo::data::dataset_names();
  for (const char* name : {"cifar10", "fashion_mnist", "synthetic"}) {
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
  }
  CHECK(mlo::data::dataset_root("cifar10", "") == "data/cifar-10-batches-bin");
  CHECK(mlo::data::dataset_root("cifar10", "/x") == "/x");
  CHECK_FALSE(mlo::data::dataset_present("cifar10", "/nonexistent/cifar"));
  CHECK(mlo::data::dataset_present("synthetic", ""));

  mlo::data::DatasetRequest request;
  request.seed = 5;
  request.synthetic_per_class = 3;
  request.synthetic_test_per_class = 2;
  const auto a = mlo::data::load_dataset("synthetic", request);
  CHECK(a.train_images.sizes() == torch::IntArrayRef({30, 3, 32, 32}));
  CHECK(a.test_images.sizes() == torch::IntArrayRef({20, 3, 32, 32}));
  CHECK(a.train_targets.bincount().eq(3).all().item<bool>());
  CHECK(a.class_names.size() == 10);
  CHECK(a.synthetic);
  const auto b = mlo::data::load_dataset("synthetic", request);
  CHECK(torch::equal(a.train_images, b.train_images));
  request.seed = 6;
  CHECK_FALSE(torch::equal(a.train_images, mlo::data::load_dataset("synthetic", request).train_images));
  {
    // The test split is another sample of the training split's classes: the training class means
    // classify it (they would not if its classes were unrelated; chance is 0.1).
    request.synthetic_per_class = 20;
    request.synthetic_test_per_class = 10;
    const auto d = mlo::data::load_dataset("synthetic", request);
    const auto x = d.train_images.to(torch::kFloat).flatten(1);
    std::vector<torch::Tensor> means;
    for (int64_t k = 0; k < 10; ++k) means.push_back(x.index({d.train_targets == k}).mean(0));
    const auto t = d.test_images.to(torch::kFloat).flatten(1);
    const auto predicted = torch::cdist(t, torch::stack(means)).argmin(1);
    CHECK(predicted.eq(d.test_targets).to(torch::kFloat).mean().item<float>() >= 0.95f);
  }
  // Normalization per dataset: Fashion-MNIST's one channel, CIFAR's three.
  CHECK(mlo::data::dataset_transform("fashion_mnist", false).mean().size() == 1);
  CHECK(mlo::data::dataset_transform("cifar10", false).mean().size() == 3);
}

TEST_CASE("Dataset registry: a program's own dataset, and unknown names", "[data]") {
  mlo::data::DatasetEntry entry;
  entry.default_root = "/data/tiny";
  entry.load = [](const mlo::data::DatasetRequest& r) {
    mlo::data::ImageDataset d;
    d.train_images = torch::zeros({4, 1, 8, 8}, torch::kUInt8);
    d.train_targets = torch::tensor({0, 1, 0, 1}, torch::kLong);
    d.test_images = torch::zeros({2, 1, 8, 8}, torch::kUInt8);
    d.test_targets = torch::tensor({0, 1}, torch::kLong);
    d.class_names = {"a", "b"};
    d.description = "tiny (" + r.root + ")";
    return d;
  };
  entry.transform = [](bool train) { return mlo::data::TransformOptions::fashion_mnist(train); };
  REQUIRE(mlo::data::register_dataset("tiny_for_test", entry));
  const auto d = mlo::data::load_dataset("tiny_for_test", {});
  CHECK(d.description == "tiny (/data/tiny)");
  CHECK(d.train_images.size(0) == 4);

  CHECK_THROWS_WITH(mlo::data::load_dataset("imagenet", {}),
                    Contains("unknown dataset 'imagenet'; registered datasets: cifar10, "
                             "fashion_mnist, synthetic, tiny_for_test"));
  CHECK_THROWS_AS(mlo::data::register_dataset("broken", mlo::data::DatasetEntry()), mlo::Error);
}

TEST_CASE("Dataset registry: Fashion-MNIST's files count as present compressed or not",
          "[data]") {
  mlo_test::TempDir tmp("registry_fashion");
  CHECK_FALSE(mlo::data::dataset_present("fashion_mnist", tmp.path.string()));
  std::ofstream(tmp.path / "train-images-idx3-ubyte") << "";  // the reader takes it as is
  CHECK(mlo::data::dataset_present("fashion_mnist", tmp.path.string()));
  // Present: prepare_dataset neither downloads nor refuses.
  CHECK(mlo::data::prepare_dataset("fashion_mnist", tmp.path.string(), /*download=*/true) ==
        tmp.path.string());
  std::filesystem::remove(tmp.path / "train-images-idx3-ubyte");
  std::ofstream(tmp.path / "train-images-idx3-ubyte.gz") << "";
  CHECK(mlo::data::dataset_present("fashion_mnist", tmp.path.string()));
}

}  // namespace dataset_registry_test
