// Convolution paths for the CIFAR ResNets: the time of one training step (forward,
// cross-entropy, backward) in the contiguous (NCHW) and channels-last (NHWC) memory formats,
// in fp32 and under half-precision autocast (bf16 on the CPU, fp16 on a GPU), interleaved round
// by round so that other load disturbs every variant alike; and how far each variant's loss and
// gradients are from fp32 NCHW's on the same weights and batch (the same math: only layout or
// half-precision rounding may differ), as the relative L2 distance of all parameter gradients
// together. On a GPU each step is timed between two synchronizations.
//
//   build/bench/resnet_formats [batch=32] [rounds=3] [model=all|resnet32|resnet50] [threads=2]
//                              [device=cpu|cuda] [benchmark] [no_tf32]
// benchmark: cuDNN's autotuner on. no_tf32: fp32 convolutions and matrix products in full fp32
// on the GPU (LibTorch's default lets cuDNN and cuBLAS use TF32 there).
#include <mlo/memory/precision.h>
#include <mlo/nn/resnet.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Variant {
  const char* name;
  bool channels_last;
  bool half;
};

struct Step {
  double loss = 0;
  std::vector<torch::Tensor> grads;
};

Step train_step(mlo::nn::Chain& model, const torch::Tensor& x, const torch::Tensor& y,
                bool half) {
  const bool cuda = x.is_cuda();
  std::optional<mlo::memory::AutocastGuard> autocast;
  if (half) {
    autocast.emplace(cuda ? mlo::Precision::kFP16 : mlo::Precision::kBF16,
                     cuda ? c10::kCUDA : c10::kCPU);
  }
  auto logits = model->forward(x).to(torch::kFloat);
  auto loss = torch::nn::functional::cross_entropy(logits, y);
  autocast.reset();
  Step out;
  out.grads = torch::autograd::grad({loss}, model->parameters());
  out.loss = loss.item<double>();
  return out;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void run_model(const std::string& name, int64_t batch, int64_t rounds,
               const torch::Device& device) {
  const bool cuda = device.is_cuda();
  const std::vector<Variant> variants{{"fp32 NCHW", false, false},
                                      {"fp32 channels-last", true, false},
                                      {cuda ? "fp16 NCHW" : "bf16 NCHW", false, true},
                                      {cuda ? "fp16 channels-last" : "bf16 channels-last", true,
                                       true}};
  torch::manual_seed(0);
  const auto x = torch::randn({batch, 3, 32, 32}).to(device);
  const auto y = torch::randint(10, {batch}).to(device);
  std::vector<mlo::nn::Chain> models;
  for (const auto& v : variants) {
    torch::manual_seed(1);  // the same weights in every variant
    auto options = name == "resnet50" ? mlo::nn::resnet50_options() : mlo::nn::resnet32_options();
    models.push_back(mlo::nn::resnet(options.channels_last(v.channels_last)));
    models.back()->to(device);  // keeps each weight's layout
  }
  // Equivalence against fp32 NCHW (one step on the same batch, same weights).
  std::vector<Step> reference_steps;
  for (size_t i = 0; i < variants.size(); ++i) {
    reference_steps.push_back(train_step(models[i], x, y, variants[i].half));
  }
  std::vector<double> best(variants.size(), std::numeric_limits<double>::infinity());
  std::vector<double> total(variants.size(), 0.0);
  for (int64_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < variants.size(); ++i) {
      synchronize(device);
      const auto start = std::chrono::steady_clock::now();
      train_step(models[i], x, y, variants[i].half);
      synchronize(device);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best[i] = std::min(best[i], s);
      total[i] += s;
    }
  }
  std::printf("%s on %s, batch %lld, %d thread(s), %lld round(s) after one warm-up step:\n",
              name.c_str(), device.str().c_str(), static_cast<long long>(batch),
              torch::get_num_threads(), static_cast<long long>(rounds));
  const Step& ref = reference_steps[0];
  for (size_t i = 0; i < variants.size(); ++i) {
    // Relative L2 distance of all gradients together: ||g - g_ref|| / ||g_ref||.
    double diff2 = 0, ref2 = 0;
    for (size_t k = 0; k < ref.grads.size(); ++k) {
      diff2 += (reference_steps[i].grads[k] - ref.grads[k]).pow(2).sum().item<double>();
      ref2 += ref.grads[k].pow(2).sum().item<double>();
    }
    const double rel = std::sqrt(diff2 / ref2);
    std::printf("  %-20s best %8.4f s  mean %8.4f s  vs fp32 NCHW x%.3f (mean x%.3f)  "
                "|dloss| %.2e  rel grad diff %.2e\n",
                variants[i].name, best[i], total[i] / rounds, best[i] / best[0],
                total[i] / total[0], std::abs(reference_steps[i].loss - ref.loss), rel);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t rounds = argc > 2 ? std::atoll(argv[2]) : 3;
  if (batch < 1 || rounds < 1) {
    std::fprintf(stderr, "resnet_formats: batch and rounds must be >= 1, got %lld and %lld\n",
                 static_cast<long long>(batch), static_cast<long long>(rounds));
    return 2;
  }
  const std::string which = argc > 3 ? argv[3] : "all";
  torch::set_num_threads(argc > 4 ? std::atoi(argv[4]) : 2);
  const std::string device_name = argc > 5 ? argv[5] : "cpu";
  if (device_name != "cpu" && device_name != "cuda") {
    std::fprintf(stderr, "resnet_formats: device must be cpu or cuda, got '%s'\n",
                 device_name.c_str());
    return 2;
  }
  if (device_name == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "resnet_formats: device cuda, but LibTorch sees no GPU\n");
    return 2;
  }
  const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, 0)
                                                     : torch::Device(torch::kCPU);
  bool benchmark = false, tf32 = true;
  for (int i = 6; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "benchmark") {
      benchmark = true;  // cuDNN's autotuner, as `engine.cudnn_benchmark: true` sets it
    } else if (flag == "no_tf32") {
      tf32 = false;
    } else {
      std::fprintf(stderr, "resnet_formats: unknown flag '%s' (benchmark, no_tf32)\n", argv[i]);
      return 2;
    }
  }
  if (device.is_cuda()) {
    at::globalContext().setBenchmarkCuDNN(benchmark);
    at::globalContext().setAllowTF32CuDNN(tf32);
    at::globalContext().setAllowTF32CuBLAS(tf32);
    std::printf("cuDNN benchmark mode: %s, TF32 for fp32 convolutions and matmuls: %s\n",
                benchmark ? "on" : "off", tf32 ? "allowed" : "off");
  }
  if (which == "all" || which == "resnet32") run_model("resnet32", batch, rounds, device);
  if (which == "all" || which == "resnet50") run_model("resnet50", batch, rounds, device);
}
