#pragma once
/// \file
/// One name table per enum (base layer). An enum `E` declares its table by specializing
/// `EnumNames<E>` next to the enum: a `kWhat` (what the values are, for errors) and a `kTable`
/// of {value, name} pairs. Configs, YAML validation, builders and logs then all read names
/// through `to_string`-style helpers, `from_string` and `enum_names` here; an unknown name is an
/// error listing the valid ones, never a silent default.

#include <mlo/base/error.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {

/// Specialize for each enum: `static constexpr const char* kWhat` and
/// `static constexpr std::pair<E, const char*> kTable[]`.
template <typename E>
struct EnumNames;

/// The valid names of `E`, in declaration order. Example: `enum_names<Precision>()` is
/// {"fp32", "bf16", "fp16"}.
template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& entry : EnumNames<E>::kTable) out.emplace_back(entry.second);
  return out;
}

/// The value of `E` called `name`, or nullopt when no value has that name.
template <typename E>
std::optional<E> try_from_string(const std::string& name) {
  for (const auto& entry : EnumNames<E>::kTable) {
    if (name == entry.second) return entry.first;
  }
  return std::nullopt;
}

/// The value of `E` called `name`; an unknown name throws `mlo::Error` listing the valid ones,
/// after `key` when given. Example: `from_string<Precision>("bf16")` is `Precision::kBF16`;
/// `from_string<Precision>("fp8", "problems.classifier.precision")` throws
/// "problems.classifier.precision: unknown precision 'fp8'; valid names: fp32, bf16, fp16".
template <typename E>
E from_string(const std::string& name, const std::string& key = "") {
  if (const auto value = try_from_string<E>(name)) return *value;
  std::string valid;
  for (const auto& entry : EnumNames<E>::kTable) {
    valid += (valid.empty() ? "" : ", ") + std::string(entry.second);
  }
  throw Error((key.empty() ? "" : key + ": ") + "unknown " + EnumNames<E>::kWhat + " '" + name +
              "'; valid names: " + valid);
}

namespace detail {
template <typename E>
const char* enum_name(E value) {
  for (const auto& entry : EnumNames<E>::kTable) {
    if (entry.first == value) return entry.second;
  }
  return "unknown";
}
}  // namespace detail

}  // namespace mlo
