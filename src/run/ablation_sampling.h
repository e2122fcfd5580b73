#pragma once
// Internal to run/ (not installed): the ablation's shared lookup of an experiment's sample batch.

#include <mlo/data/batch.h>

#include <optional>
#include <string>

namespace mlo {
namespace run {

class Experiment;

namespace detail {

/// A training batch of problem `name`, or nothing when the experiment gives none for it.
std::optional<Batch> try_sample_batch(Experiment& experiment, const std::string& name);

}  // namespace detail
}  // namespace run
}  // namespace mlo
