// One data-reweighting meta-iteration (CIFAR ResNet-50 classifier, MWN reweighter, DARTS,
// unroll 1) through mlo's engine, next to the same math as a plain LibTorch loop, in the same
// process, on the same synthetic CIFAR-shaped batches and from the same initial weights.
// The two are interleaved (mlo, plain, mlo, plain, ...) after one warm-up iteration each, so
// load from other processes disturbs both alike. Memory: the exact meter (model state plus the
// highest tensor count during an iteration), the same measure for both.
//
//   build/bench/meta_iteration [batch=32] [iterations=3] [threads=2]
//
// Last line: time_ratio=<mlo/plain> memory_ratio=<mlo/plain>.
#include "problems/reweighting/reweighting.h"

#include <mlo/memory/meter.h>
#include <mlo/mlo.h>
#include <mlo/nn/mwn.h>
#include <mlo/nn/resnet.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

namespace rw = mlo::problems::reweighting;
namespace F = torch::nn::functional;

namespace {

constexpr double kLr = 0.01, kMomentum = 0.9, kWeightDecay = 5e-4, kMetaLr = 1e-3,
                 kMetaWeightDecay = 1e-4, kAlpha = 0.01;

std::vector<mlo::Batch> make_batches(int64_t n, int64_t batch, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<mlo::Batch> out;
  for (int64_t i = 0; i < n; ++i) {
    out.emplace_back(torch::randn({batch, 3, 32, 32}), torch::randint(10, {batch}));
  }
  return out;
}

int64_t state_bytes(const std::vector<torch::nn::Module*>& modules) {
  std::set<const void*> seen;
  int64_t total = 0;
  for (auto* m : modules) {
    for (const auto& t : m->parameters()) {
      if (seen.insert(t.storage().data()).second) total += t.storage().nbytes();
    }
    for (const auto& t : m->buffers()) {
      if (seen.insert(t.storage().data()).second) total += t.storage().nbytes();
    }
  }
  return total;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The plain loop: what one would write with LibTorch alone.
struct Plain {
  mlo::nn::Chain model = nullptr;
  mlo::nn::MWN mwn = nullptr;
  std::unique_ptr<torch::optim::SGD> sgd;
  std::unique_ptr<torch::optim::Adam> adam;

  torch::Tensor frozen;  // the per-sample losses of the lower step: the weight net's input

  torch::Tensor per_sample(const mlo::Batch& b) {
    return F::cross_entropy(model->forward(b.data), b.target,
                            F::CrossEntropyFuncOptions().reduction(torch::kNone));
  }

  // Normalized weighting; the weight net reads `inputs` (detached).
  torch::Tensor weighted(const torch::Tensor& losses, const torch::Tensor& inputs) {
    const auto w = mwn->forward(inputs.detach().unsqueeze(1)).squeeze(1);
    return (w * losses).sum() / w.sum().clamp_min(1e-12);
  }

  void iteration(const mlo::Batch& train, const mlo::Batch& meta) {
    // Lower level: one SGD step on the reweighted loss.
    sgd->zero_grad();
    const auto losses = per_sample(train);
    frozen = losses.detach();
    weighted(losses, frozen).backward();
    sgd->step();

    // Upper level: DARTS finite difference around the new weights, on the same training batch,
    // with the weight net's input frozen at the lower step's losses (mlo's default,
    // reweighting.freeze_weight_inputs): the classifier's losses at w +- eps v need no graph.
    // Batch-norm running statistics are left as the lower step set them.
    std::vector<torch::Tensor> buffers;
    for (const auto& b : model->buffers()) buffers.push_back(b.clone());
    const auto w = model->parameters();
    const auto lambda = mwn->parameters();
    const auto meta_loss = F::cross_entropy(model->forward(meta.data), meta.target);
    const auto v = torch::autograd::grad({meta_loss}, w);
    double norm2 = 0;
    for (const auto& t : v) norm2 += t.pow(2).sum().item<double>();
    const double eps = kAlpha / std::sqrt(norm2);
    std::vector<torch::Tensor> saved;
    {
      torch::NoGradGuard no_grad;
      for (const auto& p : w) saved.push_back(p.clone());
    }
    auto perturbed_grad = [&](double step) {
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < w.size(); ++i) w[i].copy_(saved[i]).add_(v[i], step);
      }
      torch::Tensor shifted;
      {
        torch::NoGradGuard no_grad;
        shifted = per_sample(train);
      }
      return torch::autograd::grad({weighted(shifted, frozen)}, lambda);
    };
    const auto g_plus = perturbed_grad(eps);
    const auto g_minus = perturbed_grad(-eps);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < w.size(); ++i) w[i].copy_(saved[i]);
      const auto bs = model->buffers();
      for (size_t i = 0; i < bs.size(); ++i) bs[i].copy_(buffers[i]);
    }
    adam->zero_grad();
    for (size_t i = 0; i < lambda.size(); ++i) {
      // A new tensor, not a view of autograd's result (zero_grad detaches grads in place).
      lambda[i].mutable_grad() = (g_minus[i] - g_plus[i]).mul_(1.0 / (2.0 * eps));
    }
    adam->step();
  }
};

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t iterations = argc > 2 ? std::atoll(argv[2]) : 3;
  torch::set_num_threads(argc > 3 ? std::atoi(argv[3]) : 2);
  const auto train = make_batches(iterations + 1, batch, 1);
  const auto meta = make_batches(iterations + 1, batch, 2);

  // mlo: the reweighting pair through the engine.
  torch::manual_seed(0);
  auto classifier = std::make_shared<rw::Classifier>(
      "classifier", mlo::ProblemConfig().method(mlo::DartsOptions().alpha(kAlpha)));
  classifier->module(mlo::nn::resnet50())
      .optimizer<torch::optim::SGD>(
          torch::optim::SGDOptions(kLr).momentum(kMomentum).weight_decay(kWeightDecay))
      .data(train);
  torch::manual_seed(1);
  auto reweighter = std::make_shared<rw::Reweighter>("reweighter");
  reweighter->module(mlo::nn::MWN(100))
      .optimizer<torch::optim::Adam>(
          torch::optim::AdamOptions(kMetaLr).weight_decay(kMetaWeightDecay))
      .data(meta);
  classifier->weighting(rw::WeightNetOptions(reweighter.get()));
  mlo::Engine engine(mlo::EngineConfig().train_iters(iterations + 1).log_step(0));
  engine.add(reweighter).add(classifier).link(reweighter, classifier);
  engine.initialize();

  // Plain: the same initial weights.
  Plain plain;
  torch::manual_seed(0);
  plain.model = mlo::nn::resnet50();
  torch::manual_seed(1);
  plain.mwn = mlo::nn::MWN(100);
  plain.sgd = std::make_unique<torch::optim::SGD>(
      plain.model->parameters(),
      torch::optim::SGDOptions(kLr).momentum(kMomentum).weight_decay(kWeightDecay));
  plain.adam = std::make_unique<torch::optim::Adam>(
      plain.mwn->parameters(), torch::optim::AdamOptions(kMetaLr).weight_decay(kMetaWeightDecay));

  mlo::memory::MemoryMeter mlo_meter, plain_meter;
  const int64_t mlo_state = state_bytes({&classifier->module(), &reweighter->module()});
  const int64_t plain_state = state_bytes({plain.model.get(), plain.mwn.get()});
  double mlo_seconds = 0, plain_seconds = 0;
  int64_t mlo_peak = 0, plain_peak = 0;
  for (int64_t i = 0; i <= iterations; ++i) {  // i = 0: warm-up, not counted
    {
      mlo::memory::MemoryMeter::Active on(mlo_meter);
      mlo_meter.reset_peak();
      const auto start = std::chrono::steady_clock::now();
      engine.step();
      if (i > 0) mlo_seconds += seconds_since(start);
      if (i > 0) mlo_peak = std::max(mlo_peak, mlo_meter.peak());
    }
    {
      mlo::memory::MemoryMeter::Active on(plain_meter);
      plain_meter.reset_peak();
      const auto start = std::chrono::steady_clock::now();
      plain.iteration(train[i], meta[i]);
      if (i > 0) plain_seconds += seconds_since(start);
      if (i > 0) plain_peak = std::max(plain_peak, plain_meter.peak());
    }
    if (i == 0) {
      // The same math: after one meta-iteration both reweighters hold the same weights.
      double diff = 0, scale = 0;
      const auto a = reweighter->module().parameters();
      const auto b = plain.mwn->parameters();
      for (size_t k = 0; k < a.size(); ++k) {
        diff = std::max(diff, (a[k] - b[k]).abs().max().item<double>());
        scale = std::max(scale, b[k].abs().max().item<double>());
      }
      std::printf("same math: max |mlo - plain| of the MWN weights after one iteration = %.3g "
                  "(weights up to %.3g)\n", diff, scale);
    }
    if (i > 0) {
      std::printf("iteration %lld: mlo %.2f s, plain %.2f s (cumulative)\n",
                  static_cast<long long>(i), mlo_seconds, plain_seconds);
    }
    std::fflush(stdout);
  }
  mlo_seconds /= static_cast<double>(iterations);
  plain_seconds /= static_cast<double>(iterations);
  const double mlo_mib = mlo::memory::to_mib(mlo_state + mlo_peak);
  const double plain_mib = mlo::memory::to_mib(plain_state + plain_peak);
  std::printf("ResNet-50 + MWN, DARTS, unroll 1, batch %lld, %d thread(s), synthetic data, "
              "%lld iteration(s) after a warm-up, interleaved\n",
              static_cast<long long>(batch), torch::get_num_threads(),
              static_cast<long long>(iterations));
  std::printf("mlo:   %.2f s per meta-iteration, peak %.1f MiB\n", mlo_seconds, mlo_mib);
  std::printf("plain: %.2f s per meta-iteration, peak %.1f MiB\n", plain_seconds, plain_mib);
  std::printf("time_ratio=%.3f memory_ratio=%.3f\n", mlo_seconds / plain_seconds,
              mlo_mib / plain_mib);
}
