// [cuda] Hypergradients on a GPU equal the CPU's: DARTS, Neumann and CG on the quadratic pair
// (tests/support/quadratic.h) in double precision, moved whole to cuda:0. Only the order of
// floating-point reductions differs between the devices (cuBLAS against the CPU's BLAS), so the
// results agree to 1e-10 relative; DARTS's finite difference divides rounding by its step (about
// 5e-3 here), the iterative methods by nothing worse than the conditioning (4).
#include <mlo/hypergrad.h>
#include <support/quadratic.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <memory>

using mlo::testing::Quadratic;
using mlo::testing::relative_error;

namespace {

// The hypergradient `config`'s method gives on the CPU, then with the pair on the GPU (back on
// the host for comparison).
std::pair<torch::Tensor, torch::Tensor> cpu_and_cuda(const mlo::ProblemConfig& config) {
  Quadratic q = Quadratic::make(config);
  auto method = q.lower->config().method().make();
  const auto on_cpu = method->apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(on_cpu.size() == 1);

  const torch::Device gpu(torch::kCUDA, 0);
  q.lower->module().to(gpu);
  q.upper->module().to(gpu);
  q.lower->a = q.a.to(gpu);
  q.lower->b = q.b.to(gpu);
  REQUIRE(q.lower->w().is_cuda());
  // The levels again: a level takes its problem's device when it is made.
  q.lower_level = mlo::testing::make_level(*q.lower);
  q.upper_level = mlo::testing::make_level(*q.upper);
  auto again = q.lower->config().method().make();
  const auto on_gpu = again->apply({q.v.to(gpu)}, *q.lower_level, *q.upper_level);
  REQUIRE(on_gpu.size() == 1);
  REQUIRE(on_gpu[0].is_cuda());
  REQUIRE(on_gpu[0].scalar_type() == torch::kDouble);
  return {on_cpu[0], on_gpu[0].cpu()};
}

}  // namespace

TEST_CASE("CUDA: DARTS, Neumann and CG hypergradients equal the CPU's (double, 1e-10)",
          "[cuda][hypergrad]") {
  const std::vector<std::pair<std::string, mlo::ProblemConfig>> methods{
      {"darts", mlo::ProblemConfig().method(mlo::DartsOptions().alpha(0.01))},
      {"neumann", mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(40).alpha(0.5))},
      {"cg", mlo::ProblemConfig().method(mlo::CGOptions().iterations(10))}};
  for (const auto& [name, config] : methods) {
    INFO("method " << name);
    const auto [cpu, gpu] = cpu_and_cuda(config);
    const double error = relative_error(gpu, cpu);
    CAPTURE(error);
    CHECK(error < 1e-10);
    CHECK(cpu.norm().item<double>() > 0);
  }
}
