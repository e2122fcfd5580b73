#include <mlo/core/handle.h>

#include <mlo/core/problem.h>

#include <mlo/base/registry.h>

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

std::string demangled(const std::type_info& info) { return type_name(info); }

}  // namespace detail
}  // namespace mlo
