// Block profiling for the checkpointing planner (memory/planner.h).
#include <mlo/build_config.h>
#include <mlo/base/error.h>
#include <mlo/base/rng.h>
#include <mlo/memory/checkpoint.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#if MLO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/cuda.h>
#endif

#include <algorithm>
#include <chrono>
#include <ctime>
#include <limits>
#include <mutex>

namespace mlo {
namespace memory {
namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const c10::Device& device) {
#if MLO_WITH_CUDA
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
#else
  (void)device;
#endif
}

// Wall-clock or process CPU seconds.
class Timer {
 public:
  Timer(const c10::Device& device, bool cpu_time) : device_(device), cpu_time_(cpu_time) {}
  void start() {
    synchronize(device_);
    start_ = now();
  }
  double seconds() const {
    synchronize(device_);
    return now() - start_;
  }

 private:
  double now() const {
    if (cpu_time_) return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  c10::Device device_;
  bool cpu_time_;
  double start_ = 0;
};

int64_t bytes_of(const at::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) : 0;
}

// Puts the chain's buffers and the random generators back as they were when constructed.
class StateRestorer {
 public:
  StateRestorer(nn::ChainImpl& chain, const c10::Device& device) : chain_(chain) {
    at::NoGradGuard no_grad;
    for (const auto& b : chain.buffers()) buffers_.push_back(b.clone());
    cpu_rng_ = rng_state(at::detail::getDefaultCPUGenerator());
#if MLO_WITH_CUDA
    if (device.is_cuda()) {
      cuda_ = at::cuda::detail::getDefaultCUDAGenerator(device.index());
      cuda_rng_ = rng_state(cuda_);
    }
#else
    (void)device;
#endif
  }
  ~StateRestorer() {
    at::NoGradGuard no_grad;
    const auto buffers = chain_.buffers();
    for (size_t i = 0; i < buffers.size() && i < buffers_.size(); ++i) {
      buffers[i].copy_(buffers_[i]);
    }
    set_rng_state(at::detail::getDefaultCPUGenerator(), cpu_rng_);
    if (cuda_rng_.defined()) set_rng_state(cuda_, cuda_rng_);
  }
  StateRestorer(const StateRestorer&) = delete;
  StateRestorer& operator=(const StateRestorer&) = delete;

 private:

  nn::ChainImpl& chain_;
  std::vector<at::Tensor> buffers_;
  at::Tensor cpu_rng_, cuda_rng_;
  at::Generator cuda_;
};

}  // namespace

ChainProfile profile_chain(nn::ChainImpl& chain, const torch::Tensor& sample,
                           const ProfileOptions& options) {
  MLO_CHECK(!chain.is_empty(), "profile_chain: the chain has no blocks");
  MLO_CHECK(sample.defined(), "profile_chain: undefined sample input");
  MLO_CHECK(options.repeats() >= 1, "profile_chain: repeats must be >= 1, got ", options.repeats());
  const c10::Device device = sample.device();
  MLO_CHECK(!options.process_cpu_time() || device.is_cpu(),
            "profile_chain: process_cpu_time needs a CPU sample, got ", device.str());
  StateRestorer restorer(chain, device);
  // NOTE: the profile may run inside the caller's autocast region (a plan made lazily at the
  // first forward); casts cached by its passes would replace the weights' casts in the caller's
  // next forward, without history (memory/precision.h). Each pass casts afresh, as an uncached
  // forward does.
  CastCacheOff no_cache;
  Timer timer(device, options.process_cpu_time());
  MemoryMeter meter(device);
  MemoryMeter::Active on(meter);

  ChainProfile profile;
  profile.blocks.resize(chain.size());
  for (size_t i = 0; i < chain.size(); ++i) {
    BlockProfile& b = profile.blocks[i];
    b.name = chain.block_name(i);
    b.nograd_seconds = b.forward_seconds = b.backward_seconds =
        std::numeric_limits<double>::infinity();
  }
  // NOTE: repeats are whole passes over the chain, not runs of one block in a row, so that a
  // passing slowdown of the machine spreads over all blocks instead of skewing a few.
  for (int64_t r = 0; r < options.repeats(); ++r) {
    const bool first = r == 0;
    at::Tensor x = sample.detach();
    bool input_needs_grad = sample.requires_grad();
    for (size_t i = 0; i < chain.size(); ++i) {
      BlockProfile& b = profile.blocks[i];
      if (first) b.input_bytes = bytes_of(x);
      std::vector<at::Tensor> params;
      // (the block's parameters, or under ZeRO-3 the shards they are gathered from)
      for (const auto& p : chain.range_leaves(i, i + 1)) {
        if (p.requires_grad()) params.push_back(p);
      }

      // 1. Forward without grad: what a checkpointed segment does in forward.
      at::Tensor next;
      {
        at::NoGradGuard no_grad;
        meter.reset_peak();
        const int64_t before = meter.current();
        timer.start();
        next = chain.forward_block(i, x);
        b.nograd_seconds = std::min(b.nograd_seconds, timer.seconds());
        if (first) {
          b.nograd_peak = meter.peak() - before;
          b.output_bytes = bytes_of(next);
        }
      }

      // 2. Forward with grad, then backward of the block alone.
      at::AutoGradMode grad_mode(true);
      at::Tensor input = x.detach();
      if (input_needs_grad) input.requires_grad_(true);
      meter.reset_peak();
      int64_t before = meter.current();
      timer.start();
      at::Tensor out = chain.forward_block(i, input);
      b.forward_seconds = std::min(b.forward_seconds, timer.seconds());
      if (first) {
        b.retained_bytes = meter.current() - before;
        b.forward_peak = meter.peak() - before;
      }
      const bool output_needs_grad = out.requires_grad();
      std::vector<at::Tensor> inputs;
      if (input_needs_grad) inputs.push_back(input);
      inputs.insert(inputs.end(), params.begin(), params.end());
      if (output_needs_grad && !inputs.empty()) {
        const at::Tensor grad_output = torch::ones_like(out);
        meter.reset_peak();
        before = meter.current();
        timer.start();
        const auto grads = detail::grad_releasing_output(std::move(out), grad_output, inputs,
                                                         /*create_graph=*/false);
        b.backward_seconds = std::min(b.backward_seconds, timer.seconds());
        if (first) {
          b.backward_peak = meter.peak() - before;
          size_t k = 0;
          if (input_needs_grad) b.input_grad_bytes = bytes_of(grads[k++]);
          for (; k < grads.size(); ++k) b.param_grad_bytes += bytes_of(grads[k]);
        }
      } else {
        b.backward_seconds = 0;
      }
      input_needs_grad = output_needs_grad;
      x = next;
    }
  }
  return profile;
}

}  // namespace memory
}  // namespace mlo
