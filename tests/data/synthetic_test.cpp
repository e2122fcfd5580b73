// Synthetic CIFAR-shaped data: labelled synthetic, deterministic, class counts as asked.
#include <mlo/base/error.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/synthetic.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace synthetic_test {

using Catch::Matchers::Contains;
using mlo::data::SyntheticCifar;
using mlo::data::SyntheticOptions;

TEST_CASE("SyntheticCifar: CIFAR-shaped, labelled synthetic, balanced", "[data][synthetic]") {
  SyntheticCifar data(SyntheticOptions(103).seed(5));
  CHECK(data.is_synthetic());
  CHECK(std::string(data.name()) == "synthetic");
  REQUIRE(data.images().sizes() == torch::IntArrayRef({103, 3, 32, 32}));
  CHECK(data.images().scalar_type() == torch::kUInt8);
  CHECK(data.targets().scalar_type() == torch::kLong);
  // 103 = 10 * 10 + 3: the first three classes get 11.
  CHECK(mlo::data::class_counts(data.targets(), 10) ==
        std::vector<int64_t>{11, 11, 11, 10, 10, 10, 10, 10, 10, 10});
  CHECK(data.get(7).data.sizes() == torch::IntArrayRef({3, 32, 32}));
}

TEST_CASE("SyntheticCifar: same seed same bytes, other seed other data", "[data][synthetic]") {
  SyntheticCifar a(SyntheticOptions(50).seed(1)), b(SyntheticOptions(50).seed(1));
  SyntheticCifar c(SyntheticOptions(50).seed(2));
  CHECK(torch::equal(a.images(), b.images()));
  CHECK(torch::equal(a.targets(), b.targets()));
  CHECK_FALSE(torch::equal(a.images(), c.images()));
}

TEST_CASE("SyntheticCifar: given class counts and shape", "[data][synthetic]") {
  SyntheticCifar data(SyntheticOptions().class_counts({7, 0, 2}).shape({1, 28, 28}));
  CHECK(data.num_classes() == 3);
  CHECK(data.images().sizes() == torch::IntArrayRef({9, 1, 28, 28}));
  CHECK(mlo::data::class_counts(data.targets(), 3) == std::vector<int64_t>{7, 0, 2});
  REQUIRE_THROWS_WITH(SyntheticCifar(SyntheticOptions().class_counts({3, -1})),
                      Contains("class_counts must be >= 0, got -1"));
}

TEST_CASE("SyntheticCifar: classes are distinguishable (images near their class mean)",
          "[data][synthetic]") {
  SyntheticCifar data(SyntheticOptions(200).seed(3));
  const auto x = data.images().to(torch::kFloat).reshape({200, -1});
  const auto y = data.targets();
  std::vector<torch::Tensor> means;
  for (int64_t k = 0; k < 10; ++k) means.push_back(x.index({y == k}).mean(0));
  // Nearest class mean classifies (almost) every image: at least 95%.
  const auto predicted = torch::cdist(x, torch::stack(means)).argmin(1);
  CHECK(predicted.eq(y).to(torch::kFloat).mean().item<float>() >= 0.95f);
}

namespace {

// Share of `test` that the nearest class mean of `train` classifies right.
float nearest_mean_accuracy(const SyntheticCifar& train, const SyntheticCifar& test) {
  const auto x = train.images().to(torch::kFloat).flatten(1);
  std::vector<torch::Tensor> means;
  for (int64_t k = 0; k < 10; ++k) means.push_back(x.index({train.targets() == k}).mean(0));
  const auto t = test.images().to(torch::kFloat).flatten(1);
  const auto predicted = torch::cdist(t, torch::stack(means)).argmin(1);
  return predicted.eq(test.targets()).to(torch::kFloat).mean().item<float>();
}

}  // namespace

TEST_CASE("SyntheticCifar: a test set with the training prototype seed is the same task",
          "[data][synthetic]") {
  const SyntheticCifar train(SyntheticOptions(200).seed(3));
  // Another sample of the same classes: what the training set teaches holds on it.
  const SyntheticCifar test(SyntheticOptions(100).seed(1003).prototype_seed(3));
  CHECK_FALSE(torch::equal(test.images(), train.images().narrow(0, 0, 100)));
  CHECK(nearest_mean_accuracy(train, test) >= 0.95f);
  // Another task: its classes are unrelated to the training set's (chance is 0.1).
  const SyntheticCifar other(SyntheticOptions(100).seed(1003));
  CHECK(nearest_mean_accuracy(train, other) <= 0.3f);
  // The prototype seed left unset is the seed.
  const SyntheticCifar same(SyntheticOptions(200).seed(3).prototype_seed(3));
  CHECK(torch::equal(same.images(), train.images()));
}

TEST_CASE("SyntheticCifar: the noise is not a copy of the prototypes", "[data][synthetic]") {
  // One class of 64 images, 1 x 32 x 32: every image is round((prototype + noise) * 127.5).
  // Drawn from one seed, the two generators would give image 0 the prototype's values shifted
  // by the label shuffle's 63 draws as its noise: correlation 0.93 with that rotation of the
  // prototype (0.13 is the largest expected of unrelated noise over the 1024 rotations).
  const SyntheticCifar data(SyntheticOptions().class_counts({64}).shape({1, 32, 32}).seed(7));
  const auto x = data.images().to(torch::kDouble).flatten(1) / 127.5;
  const auto prototype = x.mean(0) - 0.5;  // the noise's mean is 0.5
  const auto noise0 = x[0] - prototype - 0.5;
  double worst = 0;
  for (int64_t shift = 0; shift < 1024; ++shift) {
    const auto p = prototype.roll(shift) - prototype.mean();
    worst = std::max(worst, std::abs((noise0 * p).sum().item<double>()) /
                                (noise0.norm().item<double>() * p.norm().item<double>()));
  }
  CHECK(worst < 0.5);
}

}  // namespace synthetic_test
