#include <mlo/core/handle.h>

#include <mlo/core/problem.h>

#include <mlo/base/registry.h>

#include <algorithm>

namespace mlo {
namespace detail {

HandleBase::HandleBase(Problem* owner, std::string target)
    : owner_(owner), target_(std::move(target)) {
  MLO_CHECK(owner_ != nullptr, "a handle needs the problem that holds it: Handle<T> h{this, ...}");
  owner_->handles_.push_back(this);
}

HandleBase::~HandleBase() { attach(nullptr); }

void HandleBase::attach(Problem* problem) {
  if (attached_ != nullptr) {
    auto& from = attached_->linked_from_;
    from.erase(std::remove(from.begin(), from.end(), this), from.end());
  }
  attached_ = problem;
  if (attached_ != nullptr) {
    attached_->linked_from_.push_back(this);
    destroyed_.clear();
  }
}

void HandleBase::target_destroyed(const std::string& name) {
  attached_ = nullptr;  // (the problem is going: no list to leave)
  link(nullptr);
  destroyed_ = name;
}

void HandleBase::unresolved() const {
  const std::string what =
      target_.empty() ? "a " + type_name() : "'" + target_ + "' (" + type_name() + ")";
  if (!destroyed_.empty()) {
    throw Error("problem '" + owner_->name() + "': its handle to " + what +
                " is used after problem '" + destroyed_ + "', which it was linked to, was " +
                "destroyed (keep the problems that a problem's handles name alive while it is "
                "used, e.g. their shared_ptr)");
  }
  throw Error("problem '" + owner_->name() + "': its handle to " + what +
              " is used before an engine linked it (Engine::initialize, which run() calls, links "
              "every handle)");
}

std::string demangled(const std::type_info& info) { return type_name(info); }

}  // namespace detail
}  // namespace mlo
