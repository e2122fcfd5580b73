#pragma once
/// \file
/// Typed reads from a LibTorch `InputArchive` (base layer): every saved-state reader in mlo uses
/// these, so a missing or mistyped entry is one clear error naming what was being read.

#include <cstdint>
#include <string>
#include <vector>

namespace torch {
namespace serialize {
class InputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {
namespace archive {

/// The value saved under `key`; throws `mlo::Error` naming `owner` and `key` when it is missing
/// or of another type. `owner` names what is being restored ("problem 'inner'",
/// "data stream", ...).
int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key,
                 const std::string& owner);
/// As `read_int`, for a `double`.
double read_double(torch::serialize::InputArchive& archive, const std::string& key,
                   const std::string& owner);
/// As `read_int`, for a `bool`.
bool read_bool(torch::serialize::InputArchive& archive, const std::string& key,
               const std::string& owner);
/// As `read_int`, for a string.
std::string read_string(torch::serialize::InputArchive& archive, const std::string& key,
                        const std::string& owner);
/// As `read_int`, for a list of integers.
std::vector<int64_t> read_ints(torch::serialize::InputArchive& archive, const std::string& key,
                               const std::string& owner);
/// As `read_int`, for a list of `double`s.
std::vector<double> read_doubles(torch::serialize::InputArchive& archive, const std::string& key,
                                 const std::string& owner);

}  // namespace archive
}  // namespace mlo
