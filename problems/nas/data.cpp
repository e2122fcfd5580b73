#include "problems/nas/data.h"

#include <mlo/base/error.h>
#include <mlo/data/registry.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <sstream>

namespace mlo {
namespace problems {
namespace nas {

void NasDataConfig::visit(Fields& s) {
  s("dataset", dataset, one_of(data::dataset_names()));
  s("root", root);
  s("download", download);
  s("train_size", train_size, at_least(2));
  s("batch_size", batch_size, at_least(1));
}

NasData load_nas_data(const NasDataConfig& config, uint64_t seed) {
  data::DatasetRequest request;
  request.root = data::prepare_dataset(config.dataset, config.root, config.download);
  request.seed = seed;
  const data::ImageDataset images = data::load_dataset(config.dataset, request);
  const int64_t available = images.train_images.size(0);
  MLO_CHECK(config.train_size <= available, "data.train_size: ", config.train_size,
            " images asked for, the training split of ", config.dataset, " holds ", available);
  at::Generator generator = at::detail::createCPUGenerator();
  generator.set_current_seed(seed);
  const at::Tensor pick = at::randperm(available, generator, at::TensorOptions().dtype(at::kLong))
                              .slice(0, 0, config.train_size);
  const int64_t half = config.train_size / 2;
  const auto floats = [](const at::Tensor& t) { return t.to(at::kFloat).div(255.0); };
  const at::Tensor x = floats(images.train_images.index_select(0, pick));
  const at::Tensor y = images.train_targets.index_select(0, pick);
  const at::Tensor train_x = x.slice(0, 0, half);
  const at::Tensor mean = train_x.mean().detach();
  const at::Tensor std = train_x.std().detach();
  const auto standard = [&](const at::Tensor& t) { return (t - mean) / std; };
  NasData out;
  out.train = Batch(standard(train_x), y.slice(0, 0, half));
  out.held_out = Batch(standard(x.slice(0, half)), y.slice(0, half));
  out.test = Batch(standard(floats(images.test_images)), images.test_targets);
  out.in_channels = x.size(1);
  out.classes = static_cast<int64_t>(images.class_names.size());
  out.synthetic = images.synthetic;
  std::ostringstream d;
  d << images.description << ": " << half << " training images, " << out.held_out.size()
    << " held out (a seeded subset of the training split), " << out.test.size() << " test";
  out.description = d.str();
  return out;
}

std::pair<double, double> loss_and_accuracy(
    const std::function<at::Tensor(const at::Tensor&)>& logits_of, const Batch& batch,
    const c10::Device& device, int64_t chunk) {
  torch::NoGradGuard no_grad;
  double loss = 0.0, correct = 0.0;
  const int64_t n = batch.size();
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    const at::Tensor x = batch.data.slice(0, begin, end).to(device);
    const at::Tensor y = batch.target.slice(0, begin, end).to(device);
    const at::Tensor logits = logits_of(x);
    loss += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<double>();
  }
  return {loss / static_cast<double>(n), correct / static_cast<double>(n)};
}

}  // namespace nas
}  // namespace problems
}  // namespace mlo
