#include <mlo/base/registry.h>

#include <c10/util/Type.h>

namespace mlo {

std::string type_name(const std::type_info& info) {
  std::string name = c10::demangle(info.name());
  // (a type of a program's own namespace reads better without the anonymous one)
  const std::string anonymous = "(anonymous namespace)::";
  for (auto at = name.find(anonymous); at != std::string::npos; at = name.find(anonymous)) {
    name.erase(at, anonymous.size());
  }
  return name;
}

}  // namespace mlo
