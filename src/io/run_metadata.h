#pragma once
// Part of src/io (internal): what produced a run's results — the build (mlo's version and
// commit, LibTorch's version), the machine (host, device, threads, world size), the seed, when
// it ran and the command line. A run (io/run.h) records it in results.json ("meta") and in the
// TensorBoard text "run/metadata" (at the step a run starts from, and with its end time at the
// last step). Under `mlo launch` the command is the `mlo run ...` line the launcher started
// each rank with.
#include <mlo/base/build_info.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlo {
namespace io {

struct RunMetadata {
  BuildInfo build;
  std::string hostname;
  std::string device;  ///< as the log prints it: "cpu", "cuda:0 (<GPU name>, 79.1 GiB)"
  int64_t threads = 0;     ///< LibTorch's intra-op threads
  int64_t world_size = 1;  ///< ranks of the run (1 without `mlo launch`)
  std::optional<int64_t> seed;  ///< the run's seed, when it says (`Run::seed`)
  int64_t start_step = 0;  ///< 0, or the global step a resumed run went on from
  std::string started;     ///< when this process started the run, ISO 8601 UTC
  std::string finished;    ///< when it wrote the results ("" until then)
  std::vector<std::string> command;  ///< the command line, one argument per entry
};

/// The current time as ISO 8601 UTC with seconds: "2026-11-25T06:01:02Z".
std::string utc_now();

/// This machine's host name ("unknown" when it cannot be read).
std::string host_name();

/// The metadata as a JSON object (the field names above; `build` flattened into
/// `mlo_version`, `git_commit`, `libtorch`, `cuda_build`).
nlohmann::json to_json(const RunMetadata& meta);

/// The metadata as a Markdown table (for TensorBoard's Text tab; `finished` only once set).
std::string to_markdown(const RunMetadata& meta);

}  // namespace io
}  // namespace mlo
