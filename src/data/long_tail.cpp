#include <mlo/base/error.h>
#include <mlo/data/long_tail.h>

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

namespace mlo {
namespace data {
namespace {

void check_labels(const at::Tensor& labels, int64_t num_classes, const char* where) {
  MLO_CHECK(labels.defined() && labels.dim() == 1, where, ": labels must be a 1-D tensor");
  MLO_CHECK(labels.scalar_type() == torch::kLong, where, ": labels must be int64, got ",
            labels.scalar_type());
  MLO_CHECK(num_classes >= 1, where, ": num_classes must be >= 1, got ", num_classes);
  if (labels.numel() > 0) {
    const auto lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    MLO_CHECK(lo >= 0 && hi < num_classes, where, ": labels must be in 0..", num_classes - 1,
              ", found ", lo < 0 ? lo : hi);
  }
}

}  // namespace

std::vector<int64_t> class_counts(const at::Tensor& labels, int64_t num_classes) {
  check_labels(labels, num_classes, "class_counts");
  const auto counts = torch::bincount(labels.to(torch::kCPU), {}, num_classes);
  return std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_classes);
}

LongTailSplit long_tail_split(const at::Tensor& labels_in, const LongTailOptions& options) {
  const int64_t c = options.num_classes();
  const double rho = options.imbalance();
  const int64_t meta_size = options.meta_size();
  check_labels(labels_in, c, "long-tail split");
  MLO_CHECK(rho >= 1.0, "long-tail split: imbalance must be >= 1, got ", rho);
  MLO_CHECK(meta_size >= 0 && meta_size % c == 0, "long-tail split: meta_size must be a multiple",
            " of num_classes (", c, ") and >= 0, got ", meta_size);
  const int64_t meta_per_class = meta_size / c;
  const int64_t valid_size = options.valid_size();
  MLO_CHECK(valid_size >= 0 && valid_size % c == 0, "long-tail split: valid_size must be a ",
            "multiple of num_classes (", c, ") and >= 0, got ", valid_size);
  const int64_t valid_per_class = valid_size / c;
  const int64_t held_out = meta_per_class + valid_per_class;
  const auto labels = labels_in.to(torch::kCPU);

  auto gen = at::make_generator<at::CPUGeneratorImpl>(options.seed());
  std::vector<int64_t> order(static_cast<size_t>(c));
  if (options.shuffle_classes()) {
    const auto perm = torch::randperm(c, gen, torch::kLong);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + c, order.begin());
  } else {
    for (int64_t k = 0; k < c; ++k) order[static_cast<size_t>(k)] = k;
  }

  std::vector<at::Tensor> meta, valid, rest;
  int64_t n_max = 0;
  for (int64_t k = 0; k < c; ++k) {
    const auto idx = (labels == k).nonzero().select(1, 0);
    const int64_t n = idx.size(0);
    MLO_CHECK(n >= held_out, "long-tail split: class ", k, " has ", n, " samples, fewer than the ",
              held_out, " its meta set (", meta_per_class, " = meta_size / ", c,
              ") and validation set (", valid_per_class, " = valid_size / ", c, ") need");
    const auto shuffled = idx.index_select(0, torch::randperm(n, gen, torch::kLong));
    meta.push_back(shuffled.narrow(0, 0, meta_per_class));
    valid.push_back(shuffled.narrow(0, meta_per_class, valid_per_class));
    rest.push_back(shuffled.narrow(0, held_out, n - held_out));
    n_max = std::max(n_max, n - held_out);
  }

  LongTailSplit split;
  split.class_order = order;
  split.train_counts.assign(static_cast<size_t>(c), 0);
  std::vector<at::Tensor> train;
  for (int64_t r = 0; r < c; ++r) {
    const double exponent = c > 1 ? static_cast<double>(r) / static_cast<double>(c - 1) : 0.0;
    const auto wanted = static_cast<int64_t>(std::floor(n_max / std::pow(rho, exponent)));
    const int64_t k = order[static_cast<size_t>(r)];
    const int64_t keep = std::min(wanted, rest[static_cast<size_t>(k)].size(0));
    split.train_counts[static_cast<size_t>(k)] = keep;
  }
  for (int64_t k = 0; k < c; ++k) {
    train.push_back(rest[static_cast<size_t>(k)].narrow(0, 0, split.train_counts[k]));
  }
  split.meta_indices = torch::cat(meta);
  split.valid_indices = torch::cat(valid);
  split.train_indices = torch::cat(train);
  return split;
}

}  // namespace data
}  // namespace mlo
