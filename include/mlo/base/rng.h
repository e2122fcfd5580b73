#pragma once
/// \file
/// Saving and restoring a random generator's state (base layer): resumable runs, activation
/// checkpointing (a recomputed block must draw the same dropout masks) and profiling passes
/// that must leave the random stream as they found it.

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace mlo {

/// The state of `generator` (thread-safe), as a tensor that `set_rng_state` accepts.
at::Tensor rng_state(at::Generator generator);
/// Puts `generator` back to `state` (thread-safe).
void set_rng_state(at::Generator generator, const at::Tensor& state);
/// The default CPU generator (what `torch::manual_seed` seeds).
at::Generator default_cpu_generator();

}  // namespace mlo
