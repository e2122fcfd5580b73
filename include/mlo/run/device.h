#pragma once
/// \file
/// Where an experiment runs: the top-level `device` key (`auto | cpu | cuda | cuda:N`, flag
/// `--device` of `mlo run`, `mlo ablate` and `mlo launch`) and the cuDNN switches under
/// `engine:` (`cudnn_benchmark`, `deterministic`).

#include <mlo/run/config.h>

#include <c10/core/Device.h>

#include <string>

namespace mlo {
class Problem;
namespace run {

/// Why `name` is not a spelling of the `device` key, or "" when it is one: `auto` (CUDA when a
/// GPU is visible, else the CPU), `cpu`, `cuda` (this process's GPU: `cuda:LOCAL_RANK` under a
/// launcher, else `cuda:0`) or `cuda:N`. Says nothing about what this machine has.
std::string device_name_error(const std::string& name);

/// The device `config.device` names for this process (see `device_name_error`). Throws
/// `mlo::Error` naming the file and the key (`RunConfig::fail`) when it asks for a GPU this
/// build of mlo or this machine does not have, before anything is built or written.
c10::Device resolve_device(const RunConfig& config);

/// Puts this process on `config`'s device: makes it the current CUDA device (so that NCCL and
/// the caching allocator use it) and applies `engine.cudnn_benchmark` and
/// `engine.deterministic` to LibTorch's global switches. Returns the device.
c10::Device apply_device(const RunConfig& config);

/// Moves `problem`'s module (parameters and buffers) to `config`'s device, with its 4-D
/// parameters in channels-last layout under `engine.channels_last`. The optimizer, if any, keeps
/// its parameters: their data change in place.
void place_problem(Problem& problem, const RunConfig& config);

}  // namespace run
}  // namespace mlo
