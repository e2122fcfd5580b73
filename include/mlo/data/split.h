#pragma once
/// \file
/// `Split`: which part of a dataset a reader loads.

namespace mlo {
namespace data {

/// The training or the test part of a dataset.
enum class Split { kTrain, kTest };

/// "train" or "test", as written in configs and logs.
inline const char* to_string(Split split) { return split == Split::kTrain ? "train" : "test"; }

}  // namespace data
}  // namespace mlo
