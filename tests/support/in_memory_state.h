#pragma once
// Test helper: a resumable state as bytes in memory and back, what saving to a file and resuming
// from it does, without the file. `saved_state`/`load_state` take anything with `state_dict` and
// `load_state_dict` (an Engine, a Problem); `archive_bytes`/`from_archive_bytes` take any writer
// and reader of an archive (a method's `save` and `load`).

#include <torch/serialize/archive.h>

#include <functional>
#include <sstream>
#include <string>

namespace mlo_test {

// What `write` puts into an archive, as bytes.
inline std::string archive_bytes(
    const std::function<void(torch::serialize::OutputArchive&)>& write) {
  torch::serialize::OutputArchive archive;
  write(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// Hands `read` the archive that `archive_bytes` wrote as `bytes`.
inline void from_archive_bytes(const std::string& bytes,
                               const std::function<void(torch::serialize::InputArchive&)>& read) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  read(archive);
}

// `object.state_dict` as bytes.
template <class T>
std::string saved_state(const T& object) {
  return archive_bytes([&](torch::serialize::OutputArchive& a) { object.state_dict(a); });
}

// `object.load_state_dict` of what `saved_state` returned.
template <class T>
void load_state(T& object, const std::string& bytes) {
  from_archive_bytes(bytes, [&](torch::serialize::InputArchive& a) { object.load_state_dict(a); });
}

}  // namespace mlo_test
