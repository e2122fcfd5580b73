#pragma once
/// \file
/// `ValuePtr<T>`: an owning pointer to a polymorphic `T` that copies by `clone()`, so that a
/// struct holding one (a configuration) keeps value semantics.

#include <memory>
#include <utility>

namespace mlo {

/// Holds a `T` (or a subclass) with value semantics: copies call `T::clone()`, which returns a
/// pointer convertible to `std::shared_ptr<T>` or `std::unique_ptr<T>`.
template <typename T>
class ValuePtr {
 public:
  ValuePtr() = default;
  explicit ValuePtr(std::shared_ptr<T> value) : value_(std::move(value)) {}
  ValuePtr(const ValuePtr& other) : value_(other.value_ ? other.value_->clone() : nullptr) {}
  ValuePtr& operator=(const ValuePtr& other) {
    if (this != &other) value_ = other.value_ ? std::shared_ptr<T>(other.value_->clone()) : nullptr;
    return *this;
  }
  ValuePtr(ValuePtr&&) noexcept = default;
  ValuePtr& operator=(ValuePtr&&) noexcept = default;

  explicit operator bool() const { return value_ != nullptr; }
  T* get() const { return value_.get(); }
  T* operator->() const { return value_.get(); }
  T& operator*() const { return *value_; }

 private:
  std::shared_ptr<T> value_;
};

}  // namespace mlo
