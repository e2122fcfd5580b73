#include <mlo/base/device.h>
#include <mlo/build_config.h>

#if MLO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <cstdio>

namespace mlo {

std::string device_description(const c10::Device& device) {
#if MLO_WITH_CUDA
  if (device.is_cuda()) {
    const auto* properties = at::cuda::getDeviceProperties(device.index());
    char memory[32];
    std::snprintf(memory, sizeof(memory), "%.1f GiB",
                  static_cast<double>(properties->totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return device.str() + " (" + properties->name + ", " + memory + ")";
  }
#endif
  return device.str();
}

}  // namespace mlo
