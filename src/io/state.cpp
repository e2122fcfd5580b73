#include <mlo/core/engine.h>
#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>
#include <mlo/base/rng.h>
#include <mlo/io/state.h>

#include "zip_check.h"

#include <mlo/build_config.h>

#include <torch/serialize/archive.h>

#if MLO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <algorithm>
#include <string>
#include <vector>

namespace mlo {
namespace io {
namespace {

constexpr int64_t kFormat = 2;  // 2: schedule, accumulation window and gradients, roll-back snapshot

// The GPUs the engine's problems live on (their dropout and random ops draw from each one's
// default generator), by index.
std::vector<c10::DeviceIndex> cuda_devices(const Engine& engine) {
  std::vector<c10::DeviceIndex> out;
  for (const auto& problem : engine.problems()) {
    const c10::Device& d = problem->device();
    if (d.is_cuda() && std::find(out.begin(), out.end(), d.index()) == out.end()) {
      out.push_back(d.index());
    }
  }
  return out;
}

at::Generator cuda_generator(c10::DeviceIndex index) {
#if MLO_WITH_CUDA
  return at::cuda::detail::getDefaultCUDAGenerator(index);
#else
  (void)index;
  throw Error("a CUDA generator in a build of mlo without CUDA");
#endif
}

}  // namespace

void save_state(const std::string& path, const Engine& engine, const StateIdentity& identity) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(kFormat));
  // (optional records: a state saved before they existed loads, its identity unsaid)
  archive.write("identity.run", c10::IValue(identity.run));
  archive.write("identity.seed", c10::IValue(identity.seed.value_or(-1)));
  archive.write("identity.has_seed", c10::IValue(identity.seed.has_value()));
  archive.write("identity.last_record", c10::IValue(identity.last_record));
  archive.write("identity.config", c10::IValue(identity.config));
  torch::serialize::OutputArchive engine_archive;
  engine.state_dict(engine_archive);
  archive.write("engine", engine_archive);
  archive.write("cpu_rng", rng_state(default_cpu_generator()));
  for (const c10::DeviceIndex index : cuda_devices(engine)) {
    archive.write("cuda_rng." + std::to_string(index), rng_state(cuda_generator(index)));
  }
  archive.write("complete", c10::IValue(true));

  // NOTE: not `save_to(path)`: LibTorch's zip writer finishes the file in its destructor and
  // throws there when a write failed (a full disk), which ends the process (std::terminate).
  // Its writes go to our stream instead, which never reports a short write back to it; a failed
  // write leaves the stream bad, and write_file_atomically turns that into an error naming the
  // file, keeping the previous one.
  write_file_atomically(path, [&](std::ostream& out) {
    archive.save_to([&](const void* data, size_t size) -> size_t {
      if (out.good()) out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return size;
    });
  });
}

int64_t load_state(const std::string& path, Engine& engine, const StateIdentity& expected,
                   StateIdentity* saved) {
  std::error_code error;
  MLO_CHECK(!std::filesystem::is_directory(path, error), "the state file '", path,
            "' is a folder, not a saved state (a run saves its state in a file of that name); ",
            "rename the folder, or start a new run there with --overwrite");
  MLO_CHECK(std::ifstream(path).good(), "no saved state at '", path, "' (the run there ",
            "saved none yet); start a new run there with --overwrite (its files are moved aside), ",
            "or in another output folder");
  // NOTE: LibTorch's reader does not check the CRC-32 that its zip writer stores for every
  // record, so flipped bytes inside a tensor would load without an error.
  const std::string damage = detail::zip_damage(path);
  MLO_CHECK(damage.empty(), "the state file '", path, "' is damaged or incomplete (", damage,
            ") and cannot be read");
  // Every tensor onto the device the run is on: a state saved on the CPU resumes on a GPU and
  // the other way round (without it, loading would move the parameters back to where they were
  // saved, or fail on a machine without that device). The generators' states come back to the
  // CPU below.
  const auto& problems = engine.problems();
  const c10::Device device = problems.empty() ? c10::Device(c10::kCPU) : problems.front()->device();
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& e) {
    if (is_out_of_memory(e)) {
      throw OutOfMemory("", "loading the state file '" + path + "' ran out of memory (LibTorch: " +
                                first_line(e) + ")");
    }
    throw Error("the state file '" + path + "' is damaged or incomplete and cannot be read");
  }
  c10::IValue value;
  MLO_CHECK(archive.try_read("complete", value) && value.toBool(), "the state file '", path,
            "' is incomplete");
  MLO_CHECK(archive.try_read("format", value) && value.toInt() == kFormat, "the state file '", path,
            "' has an unknown format");
  StateIdentity identity;
  const auto damaged = [&](const char* key) {
    return Error("the state file '" + path + "' is damaged: its record '" + key +
                 "' is not what mlo writes there");
  };
  if (archive.try_read("identity.run", value)) {
    if (!value.isString()) throw damaged("identity.run");
    identity.run = value.toStringRef();
  }
  if (archive.try_read("identity.has_seed", value)) {
    if (!value.isBool()) throw damaged("identity.has_seed");
    if (value.toBool()) {
      if (!archive.try_read("identity.seed", value) || !value.isInt()) {
        throw damaged("identity.seed");
      }
      identity.seed = value.toInt();
    }
  }
  if (archive.try_read("identity.last_record", value)) {
    if (!value.isInt()) throw damaged("identity.last_record");
    identity.last_record = value.toInt();
  }
  if (archive.try_read("identity.config", value)) {
    if (!value.isString()) throw damaged("identity.config");
    identity.config = value.toStringRef();
  }
  const std::string start_new = "start a new run there with --overwrite (its files are moved "
                                "aside), or in another folder";
  MLO_CHECK(identity.run.empty() || expected.run.empty() || identity.run == expected.run,
            "the state file '", path, "' was saved by a run of '", identity.run,
            "', and this run is one of '", expected.run,
            "': a state resumes only the run that saved it; ", start_new);
  MLO_CHECK(!identity.seed || !expected.seed || *identity.seed == *expected.seed,
            "the state file '", path, "' was saved by a run of seed ", identity.seed.value_or(0),
            ", and this run's seed is ", expected.seed.value_or(0),
            ": a state resumes only the run that saved it, its seed included (copied from "
            "another folder, or resumed with another seed?); resume with seed ",
            identity.seed.value_or(0), ", or ", start_new);
  if (saved != nullptr) *saved = identity;
  torch::serialize::InputArchive engine_archive;
  archive.read("engine", engine_archive);
  // NOTE: LibTorch refuses a tensor of another shape (the configuration changed a model's
  // size since the save) deep inside loading, with a backtrace naming no file.
  try {
    engine.load_state_dict(engine_archive);
  } catch (const Interrupted&) {
    throw;  // (a signal while loading joined the ranks: not the file's fault)
  } catch (const Error& e) {
    throw Error("the state file '" + path + "' does not fit this run: " + e.what());
  } catch (const c10::Error& e) {
    if (is_out_of_memory(e)) {
      throw OutOfMemory("", "loading the state file '" + path + "' ran out of memory (LibTorch: " +
                                first_line(e) + ")");
    }
    throw Error("the state file '" + path + "' does not fit this run (was the configuration " +
                "changed since it was saved, e.g. a model's size?): " +
                e.what_without_backtrace());
  }
  at::Tensor rng;
  archive.read("cpu_rng", rng);
  set_rng_state(default_cpu_generator(), rng.cpu());
  for (const c10::DeviceIndex index : cuda_devices(engine)) {
    // A state saved on the CPU resumed on a GPU has none: that GPU's stream starts from its seed.
    at::Tensor cuda_rng;
    if (archive.try_read("cuda_rng." + std::to_string(index), cuda_rng)) {
      set_rng_state(cuda_generator(index), cuda_rng.cpu());
    }
  }
  return engine.global_step();
}

}  // namespace io
}  // namespace mlo
