// [cuda] Whole runs on a GPU: the main job (configs/reweight_lt_fmnist.yaml) for 50 steps on
// cuda:0 next to the same run on the CPU, a resume on the GPU equal bit for bit to the
// uninterrupted run, and `mlo ablate` with the caching allocator's columns.
#include "support/scratch.h"
#include "support/text_files.h"
#include "ablate/ablate.h"
#include "runner.h"

#include <mlo/run/device.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>
#include <support/state_compare.h>
#include <support/tiny_reweighting.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kMainJob = std::string(MLO_SOURCE_DIR) + "/configs/reweight_lt_fmnist.yaml";

// The main job, short: real Fashion-MNIST where Debian's package is installed (or in the folder
// MLO_TEST_FASHION_MNIST names: scripts/gpu_check.sh unpacks it there), else synthetic data of
// the same shapes.
std::vector<std::string> short_main_job(const std::string& device) {
  std::vector<std::string> overrides{"device=" + device, "engine.train_iters=50",
                                     "engine.valid_step=25", "engine.save_step=0",
                                     "data.synthetic_fallback=true"};
  if (const char* root = std::getenv("MLO_TEST_FASHION_MNIST"); root != nullptr && *root != 0)
    overrides.push_back(std::string("data.root=") + root);
  return overrides;
}

}  // namespace

TEST_CASE("CUDA: the main job trains 50 steps on cuda:0, as it does on the CPU",
          "[cuda][run]") {
  {
    // Every problem's parameters and every batch it draws are on the GPU.
    auto experiment =
        mlo::run::make_experiment(mlo::run::load_run_config(kMainJob, short_main_job("cuda")));
    auto& engine = experiment->engine();
    engine.initialize();
    engine.step();
    for (const auto& problem : engine.problems()) {
      INFO("problem " << problem->name());
      CHECK(problem->device() == torch::Device(torch::kCUDA, 0));
      for (const auto& p : problem->module().parameters()) CHECK(p.is_cuda());
    }
  }
  mlo::RunOptions options;
  options.progress(false);
  options.dir(mlo_test::scratch_path("cuda_main_job").string());
  const auto gpu = mlo::cli::run_experiment(
      mlo::run::load_run_config(kMainJob, short_main_job("cuda")), options);
  options.dir(mlo_test::scratch_path("cpu_main_job").string());
  const auto cpu = mlo::cli::run_experiment(
      mlo::run::load_run_config(kMainJob, short_main_job("cpu")), options);
  REQUIRE(gpu.steps == 50);
  REQUIRE(cpu.steps == 50);
  const double gpu_balanced = gpu.final.at("balanced_acc");
  const double cpu_balanced = cpu.final.at("balanced_acc");
  WARN("balanced test accuracy after 50 steps: cuda " << gpu_balanced << ", cpu " << cpu_balanced);
  CHECK(std::isfinite(gpu.final.at("loss")));
  // The same data, batches and initial weights; the devices round differently (cuDNN's
  // convolutions against the CPU's), and 50 steps of SGD with momentum carry that apart a little.
  CHECK(std::abs(gpu_balanced - cpu_balanced) < 0.08);
  CHECK(gpu_balanced > 0.2);  // well above chance (0.1)
}

TEST_CASE("CUDA: a run interrupted and resumed on the GPU equals the uninterrupted one",
          "[cuda][run]") {
  // Deterministic kernels: cuDNN's and cuBLAS's reductions in a fixed order, so that two runs
  // of the same steps on one GPU give the same bits.
  const std::vector<std::string> overrides{"device=cuda", "engine.deterministic=true",
                                           "engine.train_iters=12", "engine.save_step=4"};
  const auto config = [&] {
    return mlo::run::parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides);
  };
  mlo::RunOptions options;
  options.progress(false);
  const fs::path full_dir = mlo_test::scratch_path("cuda_resume_full");
  const fs::path part_dir = mlo_test::scratch_path("cuda_resume_part");
  options.dir(full_dir.string());
  const auto full = mlo::cli::run_experiment(config(), options);
  REQUIRE(full.steps == 12);
  options.dir(part_dir.string());
  options.stop_at(5);
  REQUIRE(mlo::cli::run_experiment(config(), options).interrupted);
  options.stop_at(0);
  options.resume(true);
  const auto resumed = mlo::cli::run_experiment(config(), options);
  REQUIRE(resumed.steps == 12);
  for (const auto& [name, value] : full.final) {
    INFO("test metric " << name);
    CHECK(resumed.final.at(name) == value);  // bitwise
  }
  CHECK(mlo_test::state_file_difference((full_dir / "state.pt").string(),
                                        (part_dir / "state.pt").string()) == "");
}

TEST_CASE("CUDA: a state saved on the CPU resumes on the GPU, and the other way round",
          "[cuda][run]") {
  const std::vector<std::string> base{"engine.train_iters=8", "engine.save_step=4"};
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"cpu", "cuda"},
                                 std::pair<std::string, std::string>{"cuda", "cpu"}}) {
    INFO("saved on " << from << ", resumed on " << to);
    auto overrides = base;
    overrides.push_back("device=" + from);
    mlo::RunOptions options;
    options.progress(false);
    options.dir(mlo_test::scratch_path("cuda_cross_resume_" + from).string());
    options.stop_at(4);
    REQUIRE(mlo::cli::run_experiment(
                mlo::run::parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides),
                options)
                .interrupted);
    overrides.back() = "device=" + to;
    options.stop_at(0);
    options.resume(true);
    const auto resumed = mlo::cli::run_experiment(
        mlo::run::parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides), options);
    CHECK(resumed.steps == 8);
    CHECK(std::isfinite(resumed.final.at("loss")));
  }
}

TEST_CASE("CUDA: mlo ablate measures every one-process row with the allocator's columns",
          "[cuda][ablate]") {
  // ResNet-32 at batch 64: activations, which fp16 halves, dominate the peak.
  const fs::path dir = mlo_test::scratch_dir("cuda_ablate");
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << mlo_test::kTinyReweighting;
  mlo::cli::AblateOptions options;
  options.out_dir = (dir / "out").string();
  options.ablation.iterations(1).ranks(0).round_seconds(0.2);
  const auto result = mlo::cli::ablate_command(
      config,
      {"device=cuda", "problems.classifier.model.name=resnet32", "data.batch_size=64",
       "data.meta_batch_size=16", "data.synthetic_size=80"},
      options);
  CHECK(result.device == "cuda:0");
  REQUIRE(result.rows.size() >= 2);
  const auto& base = result.row("baseline");
  for (const auto& row : result.rows) {
    INFO("row " << row.row.key << ": peak " << row.peak_bytes << ", reserved "
                << row.reserved_peak_bytes << ", floor " << row.floor_bytes);
    CHECK(row.peak_bytes > row.state_bytes);
    // The allocator reserves at least what it hands out, the model state included.
    CHECK(row.reserved_peak_bytes >= row.peak_bytes);
    CHECK(row.floor_bytes <= row.peak_bytes);
    CHECK(row.seconds > 0);
  }
  // A meta-iteration of this model takes a few hundredths of a second on a GPU: each timing
  // round times several, enough for 0.2 s at the measured pace.
  CHECK(base.round_iterations > 1);
  CHECK(base.round_iterations * base.measured_seconds >= 0.2);
  // On CUDA the precision row is fp16 with loss scaling, and it lowers the peak.
  const auto& fp16 = result.row("precision");
  CHECK(fp16.row.name.find("fp16") != std::string::npos);
  CHECK(fp16.peak_bytes < base.peak_bytes);
  const std::string table = mlo_test::read_text(dir / "out" / "ablation.md");
  CHECK(table.find("reserved") != std::string::npos);
}
