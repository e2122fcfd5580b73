#include <mlo/core/handle.h>

#include <mlo/core/problem.h>

#include <c10/util/Type.h>

namespace mlo {
namespace detail {

HandleBase::HandleBase(Problem* owner, std::string target)
    : owner_(owner), target_(std::move(target)) {
  MLO_CHECK(owner_ != nullptr, "a handle needs the problem that holds it: Handle<T> h{this, ...}");
  owner_->handles_.push_back(this);
}

void HandleBase::unresolved() const {
  throw Error("problem '" + owner_->name() + "': its handle to " +
              (target_.empty() ? "a " + type_name() : "'" + target_ + "' (" + type_name() + ")") +
              " is used before an engine linked it (Engine::initialize, which run() calls, links "
              "every handle)");
}

std::string demangled(const std::type_info& info) {
  std::string name = c10::demangle(info.name());
  // (a type of a program's own namespace reads better without the anonymous one)
  const std::string anonymous = "(anonymous namespace)::";
  for (auto at = name.find(anonymous); at != std::string::npos; at = name.find(anonymous)) {
    name.erase(at, anonymous.size());
  }
  return name;
}

}  // namespace detail
}  // namespace mlo
