#include <mlo/run/device.h>

#include <mlo/build_config.h>
#include <mlo/base/error.h>
#include <mlo/core/problem.h>
#include <mlo/dist/process_group.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/version.h>

#if MLO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mlo {
namespace run {
namespace {

constexpr const char* kSpellings = "auto, cpu, cuda or cuda:N (N = 0, 1, ...)";

// The N of "cuda:N" (-1 for plain "cuda").
int cuda_index(const std::string& name) {
  return name.size() > 5 ? std::stoi(name.substr(5)) : -1;
}

// Under a launcher that names it (LOCAL_RANK, or Slurm's SLURM_LOCALID), this process's rank on
// its machine; else 0.
int local_rank() {
  const char* set = std::getenv("LOCAL_RANK");
  const auto where = dist::Rendezvous::from_env();
  return (set != nullptr && *set != '\0') || where.from_scheduler ? where.local_rank : 0;
}

}  // namespace

std::string device_name_error(const std::string& name) {
  if (name == "auto" || name == "cpu" || name == "cuda") return "";
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() <= 9) {
    bool digits = true;
    for (size_t i = 5; i < name.size(); ++i) digits = digits && std::isdigit(name[i]) != 0;
    if (digits) return "";
  }
  return "unknown device '" + name + "'; valid: " + kSpellings;
}

c10::Device resolve_device(const RunConfig& config) {
  const std::string& name = config.device;
  if (const std::string error = device_name_error(name); !error.empty()) {
    config.fail("device", error);
  }
  if (name == "cpu") return c10::Device(c10::kCPU);
  // NOTE: torch::cuda::device_count() is 0 in a LibTorch without CUDA and on a machine without
  // a usable GPU (no driver, or CUDA_VISIBLE_DEVICES empty): no query here can crash.
  const auto visible = static_cast<int>(torch::cuda::device_count());
  const bool usable = MLO_WITH_CUDA && visible > 0;
  if (name == "auto" && !usable) return c10::Device(c10::kCPU);
  if (!MLO_WITH_CUDA) {
    config.fail("device", "'" + name + "' asks for a GPU, but this mlo was built against "
                "LibTorch " TORCH_VERSION " without CUDA (the LibTorch 2.x lane, "
                "scripts/setup.sh --torch2, builds with CUDA); use device: cpu, or auto");
  }
  if (visible == 0) {
    config.fail("device", "'" + name + "' asks for a GPU, but LibTorch sees none on this "
                "machine (no NVIDIA GPU or driver, or CUDA_VISIBLE_DEVICES hides them); use "
                "device: cpu, or auto (a GPU when one is visible, else the CPU)");
  }
  const auto where = dist::Rendezvous::from_env();
  const int world = where.world_size;
  if (name.size() > 5 && world > 1 && !where.from_scheduler) {
    config.fail("device", "'" + name + "' would put every rank of this launch (world size " +
                std::to_string(world) + ") on one GPU; use cuda: each rank takes its local "
                "rank's GPU (LOCAL_RANK, or SLURM_LOCALID)");
  }
  const int index = name == "auto" || name == "cuda" ? local_rank() : cuda_index(name);
  if (index >= visible) {
    const std::string from = name.size() > 5 ? "its index" : "this rank's LOCAL_RANK";
    config.fail("device", "'" + name + "' is GPU " + std::to_string(index) + " (" + from +
                "), but only " + std::to_string(visible) + " GPU(s) are visible (indices 0 to " +
                std::to_string(visible - 1) + ")");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

c10::Device apply_device(const RunConfig& config) {
  const c10::Device device = resolve_device(config);
  at::Context& context = at::globalContext();
  context.setBenchmarkCuDNN(config.device_options.cudnn_benchmark);
  context.setDeterministicCuDNN(config.device_options.deterministic);
  if (config.device_options.deterministic) {
    // cuBLAS is deterministic only with a fixed workspace, chosen before its first handle; a
    // user's own setting wins.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  }
  // NOTE: warn_only: an op without a deterministic CUDA kernel (index_add_ in the metrics)
  // warns once instead of ending the run.
  context.setDeterministicAlgorithms(config.device_options.deterministic, /*warn_only=*/true);
#if MLO_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::set_device(device.index());
    // cuBLAS takes its workspace from the caching allocator at a handle's first matmul and
    // keeps it: taken here, before any meter starts, it is never counted as a step's memory
    // (and CUBLAS_WORKSPACE_CONFIG above applies to it).
    const at::Tensor a = at::ones({16, 16}, at::TensorOptions(at::kFloat).device(device));
    (void)a.mm(a);
    (void)a.to(at::kHalf).mm(a.to(at::kHalf));
    c10::cuda::device_synchronize();
  }
#endif
  return device;
}

void place_problem(Problem& problem, const RunConfig& config) {
  if (!problem.has_module()) return;
  problem.module().to(resolve_device(config));
  if (!config.device_options.channels_last) return;
  at::NoGradGuard no_grad;
  for (auto& p : problem.module().parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

}  // namespace run
}  // namespace mlo
