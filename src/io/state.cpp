#include <mlo/core/engine.h>
#include <mlo/core/error.h>
#include <mlo/io/state.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>

#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace mlo {
namespace io {
namespace {

constexpr int64_t kFormat = 1;

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

void save_state(const std::string& path, const Engine& engine) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(kFormat));
  torch::serialize::OutputArchive engine_archive;
  engine.state_dict(engine_archive);
  archive.write("engine", engine_archive);
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write("cpu_rng", generator.get_state());
  }
  archive.write("complete", c10::IValue(true));

  const std::string temporary = path + ".tmp";
  archive.save_to(temporary);
  fsync_path(temporary);
  MLO_CHECK(std::rename(temporary.c_str(), path.c_str()) == 0, "cannot move the state file '",
            temporary, "' to '", path, "'");
}

int64_t load_state(const std::string& path, Engine& engine) {
  MLO_CHECK(std::ifstream(path).good(), "no saved state at '", path,
            "'; run without --resume to start fresh");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    throw Error("the state file '" + path + "' is damaged or incomplete and cannot be read");
  }
  c10::IValue value;
  MLO_CHECK(archive.try_read("complete", value) && value.toBool(), "the state file '", path,
            "' is incomplete");
  MLO_CHECK(archive.try_read("format", value) && value.toInt() == kFormat, "the state file '", path,
            "' has an unknown format");
  torch::serialize::InputArchive engine_archive;
  archive.read("engine", engine_archive);
  engine.load_state_dict(engine_archive);
  at::Tensor rng;
  archive.read("cpu_rng", rng);
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }
  return engine.global_step();
}

}  // namespace io
}  // namespace mlo
