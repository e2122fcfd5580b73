#include <mlo/base/number_text.h>

#include <charconv>
#include <cmath>

namespace mlo {

std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // NOTE: std::to_chars without a precision gives the shortest representation that round-trips
  // (C++17 [charconv.to.chars]); 32 characters hold any double's.
  char buffer[32];
  const auto written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, written.ptr);
}

}  // namespace mlo
