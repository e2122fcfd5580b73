// [cuda] The CUDA meter reads the caching allocator: its peak rise for a known sequence of
// tensors is the allocator's own max_allocated rise (and the closed form); per-phase peaks of a
// real step come out in the CPU's format. Checkpointing on a GPU recomputes with the same
// dropout masks (the CUDA generator's state is forked and restored).
#include <mlo/build_config.h>
#include <mlo/core/engine.h>
#include <mlo/core/problem.h>
#include <mlo/memory/checkpoint.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/nn/chain.h>

#include <torch/torch.h>

#if MLO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace {

const torch::Device kGpu(torch::kCUDA, 0);
constexpr int64_t kMiB = 1024 * 1024;

// Allocates 1 MiB, then 2 MiB, frees the first, allocates 0.5 MiB: 3 MiB above the start at
// the peak. Every size is a multiple of the allocator's 512-byte rounding.
void known_sequence() {
  auto a = torch::empty({kMiB / 4}, torch::TensorOptions(torch::kFloat).device(kGpu));
  auto b = torch::empty({2 * kMiB / 4}, torch::TensorOptions(torch::kFloat).device(kGpu));
  a.reset();
  auto c = torch::empty({kMiB / 8}, torch::TensorOptions(torch::kFloat).device(kGpu));
}

#if MLO_WITH_CUDA
// The caching allocator's (current, peak) allocated bytes on `kGpu`, element 0 being all pools.
std::pair<int64_t, int64_t> allocator_bytes() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(kGpu.index());
  return {stats.allocated_bytes[0].current, stats.allocated_bytes[0].peak};
}
#endif

}  // namespace

TEST_CASE("CUDA meter: the peak rise of a known sequence is max_allocated's (3 MiB)",
          "[cuda][meter]") {
  torch::cuda::synchronize();
  int64_t allocator_rise = 3 * kMiB;  // the closed form; the allocator's own figure below
#if MLO_WITH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(kGpu.index());
  const int64_t start = allocator_bytes().first;
  known_sequence();
  allocator_rise = allocator_bytes().second - start;
#endif
  CHECK(allocator_rise == 3 * kMiB);

  // Allocated before the meter: not counted (as on the CPU, where a meter sees only what is
  // allocated while it meters).
  const auto resident = torch::empty({kMiB / 4}, torch::TensorOptions(torch::kFloat).device(kGpu));
  mlo::memory::MemoryMeter meter(kGpu);
  const int64_t before = meter.current();
  CHECK(before == 0);
  int64_t scope_peak = 0;
  {
    auto scope = mlo::memory::MemoryMeter::scope(&meter, "test", "sequence");
    known_sequence();
    scope_peak = scope.close();
  }
  CHECK(meter.peak() - before == allocator_rise);
  CHECK(scope_peak - before == allocator_rise);
  CHECK(meter.current() == before);  // everything freed
  CHECK(meter.reserved_peak() >= meter.peak());
  const auto stats = meter.stats();
  REQUIRE(stats.count({"test", "sequence"}) == 1);
  CHECK(stats.at({"test", "sequence"}).peak_delta == allocator_rise);
}

TEST_CASE("CUDA meter: a tracked step reports every phase of the level, as on the CPU",
          "[cuda][meter]") {
  struct Level : mlo::Problem {
    Level() : mlo::Problem("level") {
      module(torch::nn::Linear(256, 256));
      module().to(kGpu);
      optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
      data(std::vector<mlo::Batch>{mlo::Batch(torch::randn({512, 256}))});
    }
    torch::Tensor training_step(const mlo::Batch& batch) override {
      return module_as<torch::nn::LinearImpl>()->forward(batch.data).pow(2).mean();
    }
  };
  auto level = std::make_shared<Level>();
  mlo::Engine engine(mlo::EngineConfig().track_memory(true));
  engine.add(level);
  engine.initialize();
  engine.step();
  engine.step();
  const mlo::memory::MemoryMeter* meter = engine.memory_meter();
  REQUIRE(meter != nullptr);
  CHECK(meter->device() == kGpu);
  const auto stats = meter->stats();
  for (const char* phase : {"data", "forward", "backward", "step", "total"}) {
    INFO("phase " << phase);
    REQUIRE(stats.count({"level", phase}) == 1);
    CHECK(stats.at({"level", phase}).count == 2);
  }
  // The batch (512 x 256 floats) reaches the GPU in the data phase; the forward keeps the
  // output (512 x 256) alive for the backward.
  CHECK(stats.at({"level", "data"}).peak_delta >= 512 * 256 * 4);
  CHECK(stats.at({"level", "forward"}).peak_delta >= 512 * 256 * 4);
  CHECK(meter->table().find("level") != std::string::npos);
  CHECK(meter->json().find("\"device\":\"cuda:0\"") != std::string::npos);
}

TEST_CASE("CUDA checkpointing: the same dropout masks and gradients as the plain backward",
          "[cuda][checkpoint]") {
  torch::manual_seed(0);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(16, 64))
      .push_back("drop", torch::nn::Dropout(0.5))
      .push_back("fc2", torch::nn::Linear(64, 64))
      .push_back("drop2", torch::nn::Dropout(0.3))
      .push_back("head", torch::nn::Linear(64, 4));
  chain->to(kGpu);
  chain->train();
  const auto x = torch::randn({32, 16}).to(kGpu);
  auto run = [&](bool checkpointed) {
    if (checkpointed) {
      mlo::memory::CheckpointPlan plan;
      plan.segments = {{0, 4, true}, {4, 5, false}};
      mlo::memory::apply_plan(*chain, plan);
    } else {
      chain->clear_executor();
    }
    torch::manual_seed(42);  // seeds the CUDA generator too
    const auto y = chain->forward(x);
    auto grads = torch::autograd::grad({y.pow(2).sum()}, chain->parameters());
    grads.push_back(y.detach());
    grads.push_back(torch::rand({5}, torch::TensorOptions().device(kGpu)));  // the stream after
    return grads;
  };
  const auto plain = run(false);
  const auto checkpointed = run(true);
  REQUIRE(plain.size() == checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("tensor " << i);
    // The same kernels on the same inputs; 1e-6 leaves room for a reduction whose order cuBLAS
    // may pick differently in the recomputation. A different dropout mask would be off by O(1).
    CHECK((plain[i] - checkpointed[i]).abs().max().item<double>() <= 1e-6);
  }
}
