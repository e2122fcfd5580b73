#pragma once
// results.json in tests: what a run computed, without the metadata of the process that wrote
// it ("meta": times, command line, start step), so that a resumed run's results can be
// compared with an uninterrupted run's byte for byte.

#include <nlohmann/json.hpp>

#include <string>

namespace mlo_test {

/// `text` (results.json) with its "meta" object removed, serialized as mlo writes it; the
/// text itself when it is not a JSON object (so that a comparison still shows it).
inline std::string results_without_meta(const std::string& text) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return text;
  json.erase("meta");
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace mlo_test
