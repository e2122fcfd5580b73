#pragma once
/// \file
/// `mlo::Handle<T>`: a problem's typed, non-owning link to another problem of the same engine,
/// declared as a member and filled in by the engine when it initializes:
///
/// ```
/// struct Outer;
/// struct Inner : mlo::Problem {
///   using mlo::Problem::Problem;
///   mlo::Handle<Outer> outer{this, "outer"};   // the problem named "outer", an Outer
///   torch::Tensor training_step(const mlo::Batch& b) override;   // reads outer->lambda()
/// };
/// ```
///
/// The engine resolves every handle once, at initialization, and refuses a handle that names no
/// problem of the engine, or a problem of another type, with an error naming the problem that
/// holds it and the one it names; without a name (`mlo::Handle<Outer> outer{this}`) the handle
/// takes the one problem of that type, and refuses none or several. A handle used before that
/// (a forward in a program's own code before `Engine::initialize`) is an error, not a crash.
/// Handles never own: the engine owns the problems, so linked problems form no reference cycle.

#include <mlo/base/error.h>

#include <string>
#include <typeinfo>

namespace mlo {

class Problem;

namespace detail {

/// What the engine sees of a handle: its owner, the name it asks for, and a typed check.
class HandleBase {
 public:
  HandleBase(const HandleBase&) = delete;
  HandleBase& operator=(const HandleBase&) = delete;
  virtual ~HandleBase();

  /// The problem that holds the handle.
  const Problem& owner() const { return *owner_; }
  /// The name of the problem it links to ("" for the one problem of its type).
  const std::string& target() const { return target_; }
  /// The type it links to, as written in C++ ("Outer").
  virtual std::string type_name() const = 0;
  /// Whether `problem` is of the type the handle links to.
  virtual bool accepts(Problem& problem) const = 0;
  /// Links the handle to `problem` (which `accepts` it), or unlinks it (null).
  virtual void link(Problem* problem) = 0;

 protected:
  /// Registers the handle with `owner` (a member's constructor runs after its problem's).
  HandleBase(Problem* owner, std::string target);
  /// Records the link to `problem` (null: none) with that problem, which unlinks the handle
  /// when it is destroyed first.
  void attach(Problem* problem);
  /// Throws `mlo::Error` naming the owner and the target: the handle is not linked yet, or
  /// its problem has been destroyed.
  [[noreturn]] void unresolved() const;

 private:
  friend class mlo::Problem;
  // Called by the linked problem's destructor: the handle is unlinked, and says why.
  void target_destroyed(const std::string& name);

  Problem* owner_;
  std::string target_;
  Problem* attached_ = nullptr;
  std::string destroyed_;  // the name of a linked problem that was destroyed
};

/// The name of type `info` as written in C++ (demangled).
std::string demangled(const std::type_info& info);

}  // namespace detail

/// A typed link from the problem that holds it to another problem (see the file comment).
template <typename T>
class Handle : public detail::HandleBase {
 public:
  /// A handle of `owner` (pass `this`) to the problem named `target`, of type `T`; with no
  /// name, to the one problem of type `T` in the engine.
  explicit Handle(Problem* owner, std::string target = "")
      : detail::HandleBase(owner, std::move(target)) {}

  /// The linked problem; throws `mlo::Error` when the engine has not linked the handle yet.
  T* get() const {
    if (problem_ == nullptr) unresolved();
    return problem_;
  }
  /// Member access on the linked problem (throws as `get` does).
  T* operator->() const { return get(); }
  /// The linked problem (throws as `get` does).
  T& operator*() const { return *get(); }
  /// Whether the handle is linked.
  bool linked() const { return problem_ != nullptr; }

  /// `T`, demangled.
  std::string type_name() const override { return detail::demangled(typeid(T)); }
  /// Whether `problem` is a `T`.
  bool accepts(Problem& problem) const override {
    return dynamic_cast<T*>(&problem) != nullptr;
  }
  /// Links to `problem` (a `T`), or unlinks (null). The engine does this at initialization; a
  /// builder that makes linked problems may do it too, so that they work outside an engine.
  void link(Problem* problem) override {
    problem_ = problem == nullptr ? nullptr : dynamic_cast<T*>(problem);
    MLO_INTERNAL_ASSERT(problem == nullptr || problem_ != nullptr, "a handle linked to a ",
                        "problem of another type");
    attach(problem);
  }

 private:
  T* problem_ = nullptr;
};

}  // namespace mlo
