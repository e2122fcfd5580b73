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
  /// Empty: holds no value.
  ValuePtr() = default;
  /// Takes ownership of `value` (which may be null).
  explicit ValuePtr(std::shared_ptr<T> value) : value_(std::move(value)) {}
  /// A deep copy: `other`'s value cloned by `T::clone()` (empty if `other` is).
  ValuePtr(const ValuePtr& other) : value_(other.value_ ? other.value_->clone() : nullptr) {}
  /// Replaces the value with a clone of `other`'s (empty if `other` is).
  ValuePtr& operator=(const ValuePtr& other) {
    if (this != &other) value_ = other.value_ ? std::shared_ptr<T>(other.value_->clone()) : nullptr;
    return *this;
  }
  /// Takes the value of the moved-from pointer, without cloning.
  ValuePtr(ValuePtr&&) noexcept = default;
  /// Takes the value of the moved-from pointer, without cloning.
  ValuePtr& operator=(ValuePtr&&) noexcept = default;

  /// Whether a value is held.
  explicit operator bool() const { return value_ != nullptr; }
  /// The held value, or null when empty.
  T* get() const { return value_.get(); }
  /// The held value, or null when empty.
  T* operator->() const { return value_.get(); }
  /// The held value; must not be empty.
  T& operator*() const { return *value_; }

 private:
  std::shared_ptr<T> value_;
};

}  // namespace mlo
