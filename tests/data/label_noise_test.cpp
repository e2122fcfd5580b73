// Label noise: the realized rate per class, the flip pattern, the spread of uniform noise,
// determinism by seed, the refusals. (In the reweighting experiment: learned_loss_test.cpp.)
#include <mlo/base/error.h>
#include <mlo/data/label_noise.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>

namespace label_noise_test {

using mlo::data::LabelNoise;
using mlo::data::LabelNoiseOptions;
using Catch::Matchers::Contains;

namespace {

// n samples of each of `classes` classes, shuffled.
at::Tensor balanced_labels(int64_t classes, int64_t n) {
  const auto labels = torch::arange(classes, torch::kLong).repeat_interleave(n);
  return labels.index_select(0, torch::randperm(labels.numel(), torch::kLong));
}

}  // namespace

TEST_CASE("Label noise: flip moves exactly round(ratio n_c) labels of each class to the next",
          "[data]") {
  torch::manual_seed(0);
  // Unequal classes: 300, 101 and 7 samples; round(0.4 n): 120, 40, 3.
  const auto labels = torch::cat({torch::full({300}, 0, torch::kLong),
                                  torch::full({101}, 1, torch::kLong),
                                  torch::full({7}, 2, torch::kLong)});
  const auto noisy =
      mlo::data::corrupt_labels(labels, LabelNoiseOptions(LabelNoise::kFlip, 0.4, 3).seed(5));
  CHECK(noisy.total == 408);
  CHECK(noisy.corrupted == 163);
  CHECK(noisy.rate() == Approx(163.0 / 408.0).epsilon(1e-15));
  const auto m = noisy.confusion;
  const int64_t want[3][3] = {{180, 120, 0}, {0, 61, 40}, {3, 0, 4}};
  for (int t = 0; t < 3; ++t) {
    for (int g = 0; g < 3; ++g) {
      INFO("true " << t << ", given " << g);
      CHECK(m[t][g].item<int64_t>() == want[t][g]);
    }
  }
  // The confusion matrix is the labels' own.
  CHECK(noisy.labels.ne(labels).sum().item<int64_t>() == 163);
  CHECK(noisy.labels.index({labels.eq(1)}).eq(2).sum().item<int64_t>() == 40);
}

TEST_CASE("Label noise: uniform noise gives every wrong class about the same share", "[data]") {
  torch::manual_seed(1);
  const int64_t classes = 10, n = 3000;
  const auto labels = balanced_labels(classes, n);
  const auto noisy = mlo::data::corrupt_labels(
      labels, LabelNoiseOptions(LabelNoise::kUniform, 0.4, classes).seed(3));
  CHECK(noisy.corrupted == 12000);  // exactly 40% of each class
  CHECK(noisy.rate() == 0.4);
  const auto m = noisy.confusion;
  for (int64_t t = 0; t < classes; ++t) {
    CHECK(m[t][t].item<int64_t>() == n - 1200);
    CHECK(m[t].sum().item<int64_t>() == n);
    // Each of the 9 other classes: binomial(1200, 1/9), mean 133.3, sd 10.9; 6 sd either side.
    for (int64_t g = 0; g < classes; ++g) {
      if (g == t) continue;
      INFO("true " << t << ", given " << g);
      CHECK(std::abs(m[t][g].item<double>() - 1200.0 / 9) < 6 * std::sqrt(1200.0 / 9 * 8 / 9));
    }
  }
}

TEST_CASE("Label noise: the same seed gives the same corruption, another seed another",
          "[data]") {
  torch::manual_seed(2);
  const auto labels = balanced_labels(4, 50);
  const auto before = labels.clone();
  const auto options = LabelNoiseOptions(LabelNoise::kUniform, 0.3, 4);
  const auto a = mlo::data::corrupt_labels(labels, LabelNoiseOptions(options).seed(7));
  const auto b = mlo::data::corrupt_labels(labels, LabelNoiseOptions(options).seed(7));
  const auto c = mlo::data::corrupt_labels(labels, LabelNoiseOptions(options).seed(8));
  CHECK(torch::equal(a.labels, b.labels));
  CHECK_FALSE(torch::equal(a.labels, c.labels));
  CHECK(a.corrupted == c.corrupted);  // the rate does not depend on the seed
  // The input is not modified; none, ratio 0 and ratio 1.
  CHECK(torch::equal(labels, before));
  const auto none =
      mlo::data::corrupt_labels(labels, LabelNoiseOptions(LabelNoise::kNone, 0.5, 4));
  CHECK(torch::equal(none.labels, labels));
  CHECK(none.corrupted == 0);
  CHECK(torch::equal(none.confusion.diagonal(), torch::full({4}, 50, torch::kLong)));
  CHECK(mlo::data::corrupt_labels(labels, LabelNoiseOptions(LabelNoise::kFlip, 0.0, 4))
            .corrupted == 0);
  const auto all = mlo::data::corrupt_labels(labels, LabelNoiseOptions(LabelNoise::kFlip, 1, 4));
  CHECK(torch::equal(all.labels, (labels + 1).remainder(4)));
}

TEST_CASE("Label noise: refusals name what is wrong", "[data]") {
  const auto labels = torch::tensor({0, 1, 2}, torch::kLong);
  CHECK_THROWS_WITH(
      mlo::data::corrupt_labels(labels, LabelNoiseOptions(LabelNoise::kFlip, 1.5, 3)),
      Contains("ratio must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(
      mlo::data::corrupt_labels(labels, LabelNoiseOptions(LabelNoise::kFlip, 0.5, 2)),
      Contains("labels must be in 0..1, found 2"));
  CHECK_THROWS_WITH(mlo::data::corrupt_labels(torch::zeros({3}, torch::kLong),
                                              LabelNoiseOptions(LabelNoise::kUniform, 0.5, 1)),
                    Contains("needs at least 2 classes"));
  CHECK_THROWS_AS(mlo::data::corrupt_labels(labels.to(torch::kFloat),
                                            LabelNoiseOptions(LabelNoise::kFlip, 0.5, 3)),
                  mlo::Error);
}

TEST_CASE("Label noise: the confusion matrix as lines by class name", "[data]") {
  const auto lines =
      mlo::data::confusion_lines(torch::tensor({3, 1, 0, 4}, torch::kLong).view({2, 2}),
                                 {"cat", "dog"});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "cat: 3 1");
  CHECK(lines[1] == "dog: 0 4");
}

}  // namespace label_noise_test
