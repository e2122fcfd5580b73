#include <mlo/dist/error_file.h>

#include <mlo/base/atomic_file.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>

namespace mlo {
namespace dist {

void write_error_file(const std::string& message) noexcept {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return;
  try {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    nlohmann::json error;
    error["message"] = message;
    error["timestamp"] =
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count());
    // (the file is torchrun's, made for this worker: replaced whole)
    write_file_atomically(path, [&](std::ostream& out) {
      out << error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    });
  } catch (...) {
    // (documented: skipped)
  }
}

}  // namespace dist
}  // namespace mlo
