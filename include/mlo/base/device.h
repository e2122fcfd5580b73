#pragma once
/// \file
/// A device as runs record it: "cpu", or a GPU with its name and memory,
/// "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)".

#include <c10/core/Device.h>

#include <string>

namespace mlo {

/// `device` as logs and results name it (a CUDA device with its model and memory).
std::string device_description(const c10::Device& device);

}  // namespace mlo
