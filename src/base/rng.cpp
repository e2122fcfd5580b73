#include <mlo/base/rng.h>

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace mlo {

at::Tensor rng_state(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_rng_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

at::Generator default_cpu_generator() { return at::detail::getDefaultCPUGenerator(); }

}  // namespace mlo
