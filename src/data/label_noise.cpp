#include <mlo/base/error.h>
#include <mlo/data/label_noise.h>

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>

namespace mlo {
namespace data {

NoisyLabels corrupt_labels(const at::Tensor& labels_in, const LabelNoiseOptions& options) {
  const int64_t c = options.num_classes();
  const double ratio = options.ratio();
  MLO_CHECK(labels_in.defined() && labels_in.dim() == 1 &&
                labels_in.scalar_type() == torch::kLong,
            "label noise: labels must be a 1-D int64 tensor");
  MLO_CHECK(c >= 1, "label noise: num_classes must be >= 1, got ", c);
  MLO_CHECK(ratio >= 0 && ratio <= 1, "label noise: ratio must be in [0, 1], got ", ratio);
  const auto labels = labels_in.to(torch::kCPU).contiguous();
  if (labels.numel() > 0) {
    const auto lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    MLO_CHECK(lo >= 0 && hi < c, "label noise: labels must be in 0..", c - 1, ", found ",
              lo < 0 ? lo : hi);
  }
  const bool noisy = options.type() != LabelNoise::kNone && ratio > 0;
  MLO_CHECK(!noisy || c >= 2, "label noise: needs at least 2 classes, got ", c);

  NoisyLabels out;
  out.labels = labels.clone();
  out.total = labels.numel();
  if (noisy) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(options.seed());
    int64_t* given = out.labels.data_ptr<int64_t>();
    for (int64_t k = 0; k < c; ++k) {
      const auto members = labels.eq(k).nonzero().flatten();
      const int64_t n = members.numel();
      const auto count = static_cast<int64_t>(std::llround(ratio * static_cast<double>(n)));
      if (count == 0) continue;
      const auto chosen = members.index_select(0, torch::randperm(n, gen, torch::kLong))
                              .slice(0, 0, count)
                              .contiguous();
      // For uniform noise an offset in 1..C-1 from the true class: every other class equally.
      const auto offsets = options.type() == LabelNoise::kUniform
                               ? torch::randint(1, c, {count}, gen, torch::kLong)
                               : torch::ones({count}, torch::kLong);
      const int64_t* idx = chosen.data_ptr<int64_t>();
      const int64_t* off = offsets.data_ptr<int64_t>();
      for (int64_t i = 0; i < count; ++i) given[idx[i]] = (k + off[i]) % c;
      out.corrupted += count;
    }
  }
  out.confusion = torch::zeros({c, c}, torch::kLong);
  if (out.total > 0) {
    out.confusion.view(-1).index_add_(0, labels * c + out.labels,
                                      torch::ones({out.total}, torch::kLong));
  }
  return out;
}

std::vector<std::string> confusion_lines(const at::Tensor& confusion,
                                         const std::vector<std::string>& class_names) {
  std::vector<std::string> lines;
  const auto m = confusion.to(torch::kCPU).to(torch::kLong).contiguous();
  for (int64_t t = 0; t < m.size(0); ++t) {
    std::ostringstream line;
    line << (t < static_cast<int64_t>(class_names.size()) ? class_names[static_cast<size_t>(t)]
                                                          : std::to_string(t))
         << ":";
    for (int64_t g = 0; g < m.size(1); ++g) line << ' ' << m[t][g].item<int64_t>();
    lines.push_back(line.str());
  }
  return lines;
}

}  // namespace data
}  // namespace mlo
