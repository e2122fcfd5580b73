// Long-tailed split: class counts exactly as the formula, balanced disjoint meta set, seeded.
#include <mlo/base/error.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/subset.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace long_tail_test {

using Catch::Matchers::Contains;
using mlo::data::LongTailOptions;

namespace {

// 500 samples of each of 10 classes, interleaved: label of sample i is i % 10.
torch::Tensor balanced_labels(int64_t per_class = 500, int64_t classes = 10) {
  return torch::arange(per_class * classes, torch::kLong).remainder(classes);
}

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

}  // namespace

TEST_CASE("Long tail: train counts follow floor(n_max / rho^(r/(C-1))) over a shuffled order",
          "[data][long_tail]") {
  const int64_t c = 10, meta_size = 100;
  const double rho = 100;
  const auto labels = balanced_labels();
  const auto split = mlo::data::long_tail_split(labels, LongTailOptions(c, rho, meta_size).seed(3));

  // n_max: 500 - 100/10 remaining samples in every class.
  const int64_t n_max = 490;
  std::vector<int64_t> expected(c);
  for (int64_t r = 0; r < c; ++r) {
    expected[split.class_order[r]] =
        static_cast<int64_t>(std::floor(n_max / std::pow(rho, double(r) / double(c - 1))));
  }
  CHECK(expected[split.class_order[0]] == 490);
  CHECK(expected[split.class_order[9]] == 4);
  CHECK(split.train_counts == expected);
  CHECK(mlo::data::class_counts(labels.index_select(0, split.train_indices), c) == expected);

  // class_order is a permutation, and a seeded shuffle (not the identity for this seed).
  auto order = split.class_order;
  std::sort(order.begin(), order.end());
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(split.class_order != order);

  // Meta set: 10 per class; disjoint from train; no duplicates.
  CHECK(mlo::data::class_counts(labels.index_select(0, split.meta_indices), c) ==
        std::vector<int64_t>(c, meta_size / c));
  const auto meta = to_vector(split.meta_indices), train = to_vector(split.train_indices);
  std::set<int64_t> meta_set(meta.begin(), meta.end()), train_set(train.begin(), train.end());
  CHECK(meta_set.size() == meta.size());
  CHECK(train_set.size() == train.size());
  for (auto i : meta) CHECK(train_set.count(i) == 0);
}

TEST_CASE("Long tail: a validation set is held out before the split, balanced and disjoint",
          "[data][long_tail]") {
  const int64_t c = 10, meta_size = 100, valid_size = 200;
  const double rho = 100;
  const auto labels = balanced_labels();
  const auto split = mlo::data::long_tail_split(
      labels, LongTailOptions(c, rho, meta_size).valid_size(valid_size).seed(3));

  // Balanced: valid_size / C of every class, whatever the class's training count.
  CHECK(mlo::data::class_counts(labels.index_select(0, split.valid_indices), c) ==
        std::vector<int64_t>(c, valid_size / c));
  CHECK(mlo::data::class_counts(labels.index_select(0, split.meta_indices), c) ==
        std::vector<int64_t>(c, meta_size / c));

  // Taken before the long tail: n_max = 500 - 10 (meta) - 20 (validation) = 470.
  const int64_t n_max = 470;
  std::vector<int64_t> expected(c);
  for (int64_t r = 0; r < c; ++r) {
    expected[split.class_order[r]] =
        static_cast<int64_t>(std::floor(n_max / std::pow(rho, double(r) / double(c - 1))));
  }
  CHECK(split.train_counts == expected);
  CHECK(mlo::data::class_counts(labels.index_select(0, split.train_indices), c) == expected);

  // Disjoint from meta and train, no duplicates.
  const auto valid = to_vector(split.valid_indices), meta = to_vector(split.meta_indices),
             train = to_vector(split.train_indices);
  const std::set<int64_t> valid_set(valid.begin(), valid.end()), meta_set(meta.begin(), meta.end()),
      train_set(train.begin(), train.end());
  CHECK(valid_set.size() == valid.size());
  for (auto i : valid) {
    INFO("validation index " << i);
    CHECK(meta_set.count(i) == 0);
    CHECK(train_set.count(i) == 0);
  }

  // Without a validation set the split is exactly the one it always was (same seed).
  const auto none = mlo::data::long_tail_split(labels, LongTailOptions(c, rho, meta_size).seed(3));
  const auto zero =
      mlo::data::long_tail_split(labels, LongTailOptions(c, rho, meta_size).valid_size(0).seed(3));
  CHECK(none.valid_indices.numel() == 0);
  CHECK(torch::equal(none.meta_indices, zero.meta_indices));
  CHECK(torch::equal(none.train_indices, zero.train_indices));
  // The meta set does not move when a validation set is added.
  CHECK(torch::equal(none.meta_indices, split.meta_indices));

  REQUIRE_THROWS_WITH(
      mlo::data::long_tail_split(labels, LongTailOptions(c, rho, meta_size).valid_size(15)),
      Contains("valid_size must be a multiple of num_classes (10)"));
  REQUIRE_THROWS_WITH(
      mlo::data::long_tail_split(labels, LongTailOptions(c, rho, meta_size).valid_size(4950)),
      Contains("class 0 has 500 samples, fewer than the 505"));
}

TEST_CASE("Long tail: CIFAR-10 sizes give the documented counts", "[data][long_tail]") {
  const auto split = mlo::data::long_tail_split(
      balanced_labels(5000), LongTailOptions(10, 100, 1000).shuffle_classes(false));
  CHECK(split.train_counts ==
        std::vector<int64_t>{4900, 2937, 1760, 1055, 632, 379, 227, 136, 81, 49});
}

TEST_CASE("Long tail: same seed same split, another seed another", "[data][long_tail]") {
  const auto labels = balanced_labels();
  const auto a = mlo::data::long_tail_split(labels, LongTailOptions(10, 50, 100).seed(1));
  const auto b = mlo::data::long_tail_split(labels, LongTailOptions(10, 50, 100).seed(1));
  const auto d = mlo::data::long_tail_split(labels, LongTailOptions(10, 50, 100).seed(2));
  CHECK(torch::equal(a.meta_indices, b.meta_indices));
  CHECK(torch::equal(a.train_indices, b.train_indices));
  CHECK(a.class_order == b.class_order);
  CHECK_FALSE(torch::equal(a.meta_indices, d.meta_indices));
  CHECK(a.class_order != d.class_order);
}

TEST_CASE("Long tail: n_max is the largest remaining class; small classes keep what they have",
          "[data][long_tail]") {
  // Classes of 30, 12 and 6 samples, meta 2 per class: remaining 28, 10, 4; rho 4, in order.
  std::vector<int64_t> values;
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t i = 0; i < std::vector<int64_t>{30, 12, 6}[k]; ++i) values.push_back(k);
  const auto split = mlo::data::long_tail_split(torch::tensor(values),
                                                LongTailOptions(3, 4, 6).shuffle_classes(false));
  // floor(28 / 4^0) = 28; floor(28 / 4^0.5) = 14 -> capped at 10; floor(28 / 4) = 7 -> capped at 4.
  CHECK(split.train_counts == std::vector<int64_t>{28, 10, 4});
}

TEST_CASE("Long tail: bad arguments are refused with the value", "[data][long_tail]") {
  const auto labels = balanced_labels(5);
  using mlo::data::long_tail_split;
  REQUIRE_THROWS_WITH(long_tail_split(labels, LongTailOptions(10, 0.5, 10)),
                      Contains("imbalance must be >= 1, got 0.5"));
  REQUIRE_THROWS_WITH(long_tail_split(labels, LongTailOptions(10, 10, 15)),
                      Contains("meta_size must be a multiple of num_classes (10)"));
  REQUIRE_THROWS_WITH(long_tail_split(labels, LongTailOptions(10, 10, 60)),
                      Contains("class 0 has 5 samples, fewer than the 6"));
  REQUIRE_THROWS_WITH(long_tail_split(labels, LongTailOptions(5, 10, 10)),
                      Contains("labels must be in 0..4, found 9"));
}

TEST_CASE("Subset: gathers images and targets by index", "[data][long_tail]") {
  const auto images = torch::arange(6 * 2, torch::kFloat).reshape({6, 2});
  const auto targets = torch::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  mlo::data::Subset s(images, targets, torch::tensor(std::vector<int64_t>{4, 1, 4}), "toy");
  CHECK(s.size().value() == 3);
  CHECK(torch::equal(s.targets(), torch::tensor(std::vector<int64_t>{4, 1, 4})));
  CHECK(torch::equal(s.get(1).data, images[1]));
  CHECK(s.name() == "toy");
  REQUIRE_THROWS_WITH(mlo::data::Subset(images, targets, torch::tensor(std::vector<int64_t>{6})),
                      Contains("index 6 out of range (6 samples)"));
}

}  // namespace long_tail_test
