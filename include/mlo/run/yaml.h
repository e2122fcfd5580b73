#pragma once
/// \file
/// Experiment configuration <-> YAML. Reading validates everything before training starts:
/// unknown keys, wrong types and out-of-range values fail with an `mlo::Error` that names the
/// file, the line and the key path, e.g.
///   configs/x.yaml:12:9: problems.classifier.optimizer.lr: must be > 0, got -0.1

#include <mlo/run/config.h>

#include <cstddef>
#include <string>
#include <vector>

namespace mlo {
namespace run {

/// The largest configuration file `load_run_config` reads (1 MiB).
inline constexpr size_t kMaxConfigBytes = 1024 * 1024;

/// Reads the YAML file at `path` (one document, at most `kMaxConfigBytes`, at most 100000
/// values once aliases are expanded), applies `overrides` ("a.b.c=value", the value parsed as
/// YAML, so lists work: "data.root=/d", "problems.classifier.scheduler.milestones=[100,200]")
/// and returns the validated configuration.
RunConfig load_run_config(const std::string& path,
                               const std::vector<std::string>& overrides = {});

/// The same from YAML text; `source` names it in messages.
RunConfig parse_run_config(const std::string& yaml, const std::string& source,
                                const std::vector<std::string>& overrides = {});

/// The resolved configuration (every key, defaults included) as YAML that reads back the same.
std::string to_yaml(const RunConfig& config);

}  // namespace run
}  // namespace mlo
