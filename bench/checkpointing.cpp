// Activation checkpointing on CIFAR ResNet-50, batch 32, one training step on CPU (forward and
// backward of cross-entropy, gradients accumulated into existing .grad): the no-checkpoint
// baseline, sqrt, optimal plans at several budgets and the smallest-memory plan under a 30%
// time cap. Memory: the step's peak above its start (activations and temporaries; parameters
// and their gradients exist before), exact meter. Time: the process's CPU time (with one
// intra-op thread, the wall time of an idle machine); overheads are medians over pairs of a
// baseline step and a plan's step run back to back; wall-clock overheads are printed beside.
// Last line: resnet50_cut=<1 - peak/baseline peak> overhead=<time/baseline time - 1> for the
// planner's pick under the 30% cap.
//
// Usage: checkpointing [batch=32]
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/nn/resnet.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

namespace mm = mlo::memory;

namespace {

// One training step's peak above its start and its times.
struct Run {
  int64_t peak = 0;
  double cpu = 0;  // process CPU time (other processes' load does not count)
  double wall = 0;
};

Run step(mlo::nn::ChainImpl& model, const torch::Tensor& x, const torch::Tensor& y,
         mm::MemoryMeter& meter) {
  for (auto& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
  meter.reset_peak();
  const int64_t start = meter.current();
  const auto wall = std::chrono::steady_clock::now();
  const std::clock_t cpu = std::clock();
  {
    const auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();
  }
  Run run;
  run.cpu = static_cast<double>(std::clock() - cpu) / CLOCKS_PER_SEC;
  run.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  run.peak = meter.peak() - start;
  return run;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0.0 : (n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]));
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 32;
  torch::manual_seed(0);
  auto model = mlo::nn::resnet50();
  model->train();
  const auto x = torch::randn({batch, 3, 32, 32});
  const auto y = torch::randint(10, {batch});
  std::printf("CIFAR ResNet-50 (%zu blocks), batch %lld, CPU, %d threads, LibTorch %s\n",
              model->size(), static_cast<long long>(batch), torch::get_num_threads(),
              TORCH_VERSION);

  mm::MemoryMeter meter;
  mm::MemoryMeter::Active on(meter);
  step(*model, x, y, meter);  // warm-up; also allocates the .grad tensors

  const auto t0 = std::chrono::steady_clock::now();
  const auto profile =
      mm::profile_chain(*model, x, mm::ProfileOptions().repeats(3).process_cpu_time(true));
  std::printf("profiled in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const auto model_costs = mm::CostModel().keep_param_grads(false);  // .grad exists already
  auto options = [&](mlo::Checkpointing strategy) {
    return mlo::CheckpointingOptions(strategy).cost_model(model_costs);
  };

  struct Row {
    Row(std::string name_, mm::CheckpointPlan plan_)
        : name(std::move(name_)), plan(std::move(plan_)) {}
    std::string name;
    mm::CheckpointPlan plan;
    int64_t peak = 0;
    std::vector<double> cpu, wall, cpu_ratio, wall_ratio;
  };
  std::vector<Row> rows;
  rows.emplace_back("none", mm::make_plan(profile, options(mlo::Checkpointing::kNone)));
  rows.emplace_back("sqrt", mm::make_plan(profile, options(mlo::Checkpointing::kSqrt)));
  for (const double fraction : {0.6, 0.5, 0.45, 0.4}) {
    rows.emplace_back(
        "optimal " + std::to_string(static_cast<int>(100 * fraction)) + "%",
        mm::make_plan(profile, options(mlo::Checkpointing::kOptimal).budget_fraction(fraction)));
  }
  rows.emplace_back(
      "min_memory 30%",
      mm::make_plan(profile, options(mlo::Checkpointing::kMinMemory).max_overhead(0.3)));
  // Each plan runs right after a baseline step, and its overhead is the median over such pairs
  // of (plan time / baseline time): both steps of a pair see the same machine state, which on a
  // shared machine drifts more than the plans differ.
  Row& base = rows.front();
  auto pair = [&](Row& row) {
    model->clear_executor();
    const Run b = step(*model, x, y, meter);
    base.peak = b.peak;
    base.cpu.push_back(b.cpu);
    base.wall.push_back(b.wall);
    mm::apply_plan(*model, row.plan);
    const Run r = step(*model, x, y, meter);
    row.peak = r.peak;
    row.cpu.push_back(r.cpu);
    row.wall.push_back(r.wall);
    row.cpu_ratio.push_back(r.cpu / b.cpu);
    row.wall_ratio.push_back(r.wall / b.wall);
  };
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 1; i < rows.size(); ++i) pair(rows[i]);
  }
  for (int round = 0; round < 2; ++round) pair(rows.back());  // the pick: 5 pairs
  model->clear_executor();
  base.cpu_ratio = base.wall_ratio = {1.0};

  const double base_peak = static_cast<double>(base.peak);
  std::printf("%-15s %4s %9s %9s %6s %8s %8s %8s %7s %7s\n", "plan", "ckpt", "pred MiB", "meas MiB",
              "cut", "pred ovh", "meas ovh", "wall ovh", "cpu s", "wall s");
  for (const auto& row : rows) {
    std::printf("%-15s %4zu %9.1f %9.1f %6.3f %8.3f %8.3f %8.3f %7.2f %7.2f\n", row.name.c_str(),
                row.plan.num_checkpointed(), mm::to_mib(row.plan.predicted.peak_bytes),
                mm::to_mib(row.peak), 1.0 - row.peak / base_peak, row.plan.time_overhead(),
                median(row.cpu_ratio) - 1.0, median(row.wall_ratio) - 1.0, median(row.cpu),
                median(row.wall));
  }
  std::printf("%s", rows.back().plan.to_string().c_str());
  std::printf("resnet50_cut=%.3f overhead=%.3f\n", 1.0 - rows.back().peak / base_peak,
              median(rows.back().cpu_ratio) - 1.0);
  return 0;
}
