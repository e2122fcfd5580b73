// The `device` key and the cuDNN switches: spellings, `auto`, a GPU asked for where there is
// none (an error naming the file and key, before anything is built or written), `--device` on
// the command line, and batches placed on the problem's device.
#include "support/scratch.h"
#include "support/tiny_reweighting.h"
#include "ablate/ablate.h"
#include "run_arguments.h"
#include "runner.h"

#include <mlo/build_config.h>
#include <mlo/run/device.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <ATen/Context.h>
#include <CLI/CLI.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <filesystem>

namespace device_test {

using Catch::Matchers::Contains;
using mlo::run::device_name_error;
using mlo::run::parse_run_config;
using mlo::run::resolve_device;

namespace {

bool gpu_visible() { return MLO_WITH_CUDA && torch::cuda::device_count() > 0; }

mlo::run::RunConfig tiny(const std::vector<std::string>& overrides) {
  return parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides);
}

}  // namespace

TEST_CASE("Device: the key's spellings", "[run][device]") {
  for (const char* ok : {"auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:1234"}) {
    INFO(ok);
    CHECK(device_name_error(ok).empty());
  }
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:12345", "cpu:0"}) {
    INFO(bad);
    CHECK_THAT(device_name_error(bad), Contains("valid: auto, cpu, cuda or cuda:N"));
  }
  REQUIRE_THROWS_WITH(tiny({"device=gpu"}),
                      Contains("tiny.yaml (--set device=gpu)") && Contains("device") &&
                          Contains("unknown device 'gpu'"));
}

TEST_CASE("Device: cpu always, and auto is a GPU only where one is visible", "[run][device]") {
  CHECK(resolve_device(tiny({"device=cpu"})) == c10::Device(c10::kCPU));
  const c10::Device automatic = resolve_device(tiny({}));  // the default is auto
  if (gpu_visible()) {
    CHECK(automatic == c10::Device(c10::kCUDA, 0));
  } else {
    CHECK(automatic == c10::Device(c10::kCPU));
  }
  auto experiment = mlo::run::make_experiment(tiny({"device=cpu"}));
  for (const auto& problem : experiment->engine().problems()) {
    for (const auto& p : problem->module().parameters()) CHECK(p.is_cpu());
  }
}

TEST_CASE("Device: a GPU asked for where none is visible is an error naming the key",
          "[run][device]") {
  // On a machine with GPUs, one index past them is the same kind of error.
  const std::string device =
      gpu_visible() ? "cuda:" + std::to_string(torch::cuda::device_count()) : "cuda";
  const auto config = tiny({"device=" + device});
  // (Catch's combined matchers hold their parts by reference: one per assertion, not stored.)
  const std::string key = "tiny.yaml (--set device=" + device + "): device: '" + device;
  const std::string why = gpu_visible() ? "GPU(s) are visible" : "asks for a GPU";
  REQUIRE_THROWS_WITH(resolve_device(config), Contains(key) && Contains(why));
  REQUIRE_THROWS_WITH(mlo::run::make_experiment(config), Contains(key) && Contains(why));
  if (!gpu_visible()) {
    // What the user is told to do instead.
    REQUIRE_THROWS_WITH(resolve_device(config), Contains("use device: cpu, or auto"));
  }
  // `mlo run` writes nothing: no output folder, no log.
  const auto out = mlo_test::scratch_path("device_test_run");
  mlo::RunOptions options;
  options.progress(false);
  options.dir(out.string());
  REQUIRE_THROWS_WITH(mlo::cli::run_experiment(config, options), Contains(key) && Contains(why));
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("Device: --device on mlo run and mlo ablate is --set device=...", "[run][device]") {
  CLI::App app;
  mlo::cli::RunArguments run;
  mlo::cli::add_run_command(app, run);
  // (CLI11 takes the arguments last first: `mlo run x.yaml --set seed=1 --device cpu`.)
  app.parse(std::vector<std::string>{"cpu", "--device", "seed=1", "--set", "x.yaml", "run"});
  CHECK(run.overrides == std::vector<std::string>{"seed=1", "device=cpu"});
  CLI::App app2;
  mlo::cli::RunArguments unused;
  mlo::cli::add_run_command(app2, unused);
  mlo::cli::AblateCommand ablate2;
  ablate2.add_to(app2);
  app2.parse(std::vector<std::string>{"cuda:1", "--device", "x.yaml", "ablate"});
  CHECK(ablate2.overrides == std::vector<std::string>{"device=cuda:1"});
}

TEST_CASE("Device: engine.cudnn_benchmark and engine.deterministic reach LibTorch",
          "[run][device]") {
  at::Context& context = at::globalContext();
  mlo::run::make_experiment(tiny({"engine.cudnn_benchmark=true", "engine.deterministic=true"}));
  CHECK(context.benchmarkCuDNN());
  CHECK(context.deterministicCuDNN());
  CHECK(context.deterministicAlgorithms());
  mlo::run::make_experiment(tiny({}));  // both default to off
  CHECK_FALSE(context.benchmarkCuDNN());
  CHECK_FALSE(context.deterministicCuDNN());
  CHECK_FALSE(context.deterministicAlgorithms());
}

TEST_CASE("Device: a batch already on the device is not copied", "[run][device]") {
  const mlo::Batch batch(torch::randn({4, 3}), torch::arange(4));
  const mlo::Batch same = batch.to(c10::Device(c10::kCPU));
  CHECK(same.data.is_same(batch.data));
  CHECK(same.target.is_same(batch.target));
  const mlo::Batch empty = mlo::Batch().to(c10::Device(c10::kCPU));
  CHECK_FALSE(empty.data.defined());
}

TEST_CASE("Device: engine.channels_last lays convolutions out NHWC and keeps the math",
          "[run][device]") {
  const auto trained = [](bool channels_last) {
    auto experiment = mlo::run::make_experiment(
        tiny({"device=cpu", std::string("engine.channels_last=") +
                                (channels_last ? "true" : "false")}));
    experiment->engine().run();  // two steps of both levels, DARTS through the CNN
    return experiment->problem("classifier")->module().parameters();
  };
  const auto plain = trained(false);
  const auto nhwc = trained(true);
  REQUIRE(plain.size() == nhwc.size());
  int64_t convolutions = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("parameter " << i << " " << plain[i].sizes());
    if (plain[i].dim() == 4) {
      ++convolutions;
      CHECK(nhwc[i].is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK_FALSE(nhwc[i].is_contiguous());  // (3x3 kernels over several channels)
    }
    // Other kernels, other summation orders: float rounding apart, nothing more.
    CHECK((plain[i] - nhwc[i]).abs().max().item<double>() < 1e-5);
  }
  CHECK(convolutions >= 2);
}

}  // namespace device_test
