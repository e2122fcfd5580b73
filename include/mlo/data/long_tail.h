#pragma once
/// \file
/// The long-tailed split of the data-reweighting experiments (Meta-Weight-Net, and Betty's
/// data-reweighting tutorial): a small balanced meta set, and an imbalanced training set.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <vector>

namespace mlo {
namespace data {

/// Parameters of the long-tailed split.
/// Example: `LongTailOptions(/*num_classes=*/10, /*imbalance=*/100, /*meta_size=*/1000).seed(1)`.
struct LongTailOptions {
  /// The three parameters without a default; `long_tail_split` checks their values.
  LongTailOptions(int64_t num_classes, double imbalance, int64_t meta_size)
      : num_classes_(num_classes), imbalance_(imbalance), meta_size_(meta_size) {}
  /// C: labels are 0 .. C-1.
  TORCH_ARG(int64_t, num_classes);
  /// rho >= 1: ratio between the largest and the smallest class of the training set.
  TORCH_ARG(double, imbalance);
  /// Size of the balanced meta set; a multiple of `num_classes` (meta_size / C per class).
  TORCH_ARG(int64_t, meta_size);
  /// Size of a balanced validation set held out of the training data before the long-tailed
  /// split; a multiple of `num_classes` (valid_size / C per class); 0: none.
  TORCH_ARG(int64_t, valid_size) = 0;
  /// Seeds the per-class shuffles and the class order.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Shuffle which class gets which count (false: class 0 is the largest, C-1 the rarest).
  TORCH_ARG(bool, shuffle_classes) = true;
};

/// Result of `long_tail_split`: indices into the labels it was given.
struct LongTailSplit {
  /// Balanced meta set, meta_size / C samples of every class (int64, grouped by class).
  at::Tensor meta_indices;
  /// Balanced validation set, valid_size / C samples of every class, disjoint from the meta and
  /// the training sets (int64, grouped by class; empty when valid_size is 0).
  at::Tensor valid_indices;
  /// Long-tailed training set, disjoint from the meta and validation sets (int64, grouped by
  /// class).
  at::Tensor train_indices;
  /// Training samples of each class, by label.
  std::vector<int64_t> train_counts;
  /// Classes from the largest to the rarest: `class_order[r]` got count rank r.
  std::vector<int64_t> class_order;
};

/// Splits a labelled dataset into a balanced meta set, a balanced validation set and a
/// long-tailed training set.
///
/// 1. Every class's indices are shuffled (seeded); the first meta_size / C of each class form the
///    meta set, the next valid_size / C the validation set. The rest of each class is what
///    remains for training. (With valid_size = 0 the split is the same as without one.)
/// 2. With n_max the number of remaining samples of the largest class, the class of rank
///    r = 0 .. C-1 keeps
///        n_r = floor(n_max / rho^(r / (C - 1)))
///    training samples (n_0 = n_max, n_{C-1} = floor(n_max / rho); all n_max when C = 1). A class
///    with fewer remaining samples keeps them all. Which class gets rank r follows a seeded shuffle
///    of the class order (`shuffle_classes`), so which class is rare depends on the seed.
///
/// For CIFAR-10 train (5000 per class), rho = 100, meta_size = 1000 and no validation set:
/// n_max = 4900, counts 4900, 2937, 1760, 1055, ..., 81, 49. Same labels, options and seed give the
/// same split.
///
/// Example:
/// ```
/// auto split = mlo::data::long_tail_split(train.targets(), LongTailOptions(10, 100, 1000));
/// mlo::data::Subset meta = mlo::data::subset(train, split.meta_indices);
/// ```
LongTailSplit long_tail_split(const at::Tensor& labels, const LongTailOptions& options);

/// Samples of each class in `labels` (int64, values 0 .. num_classes-1).
std::vector<int64_t> class_counts(const at::Tensor& labels, int64_t num_classes);

}  // namespace data
}  // namespace mlo
