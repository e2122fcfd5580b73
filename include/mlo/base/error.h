#pragma once
/// \file
/// Errors, in the base layer (every area may use it; it depends on nothing else of mlo):
/// `MLO_CHECK` for mistakes a user can make (bad config, bad graph, bad input),
/// `MLO_INTERNAL_ASSERT` for invariants of mlo itself.

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace mlo {

/// Thrown for user and configuration errors. The message names the problem, field and value.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown when LibTorch could not allocate the memory a step of problem `problem()` asked for
/// (or building a model or data set, loading a state, a validation or an evaluation, with
/// `problem()` empty): the message names what was asked. Repeating the run repeats it; a
/// smaller model or batch, or the memory tools, help.
class OutOfMemory : public Error {
 public:
  /// An allocation failure of `problem`'s step (empty: of no problem's step), told by `message`.
  OutOfMemory(std::string problem, const std::string& message)
      : Error(message), problem_(std::move(problem)) {}
  /// The problem whose step asked for the memory; empty when no problem's step did.
  const std::string& problem() const { return problem_; }

 private:
  std::string problem_;
};

/// Whether LibTorch's `error` says that an allocation failed (on the CPU or a GPU).
inline bool is_out_of_memory(const c10::Error& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  const std::string what = error.what_without_backtrace();
  for (const char* said : {"not enough memory", "can't allocate memory", "out of memory"}) {
    if (what.find(said) != std::string::npos) return true;
  }
  return false;
}

/// The first line of LibTorch's `error` (its message without the trace).
inline std::string first_line(const c10::Error& error) {
  const std::string what = error.what_without_backtrace();
  return what.substr(0, what.find('\n'));
}

/// Thrown when an invariant of mlo itself fails: a bug in mlo, not in user code.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace mlo

/// Throws `mlo::Error` with the concatenated message when `cond` is false.
/// Example:
/// ``MLO_CHECK(steps > 0, "problem '", name, "': unroll_steps must be > 0, got ", steps);``
#define MLO_CHECK(cond, ...)                       \
  do {                                             \
    if (!(cond)) {                                 \
      throw ::mlo::Error(::c10::str(__VA_ARGS__)); \
    }                                              \
  } while (false)

/// Checks an invariant of mlo itself; failing it is a bug in mlo, not in user code. Throws
/// `mlo::InternalError` naming the condition, the place and the message, and asking for a report
/// to mlo (LibTorch's own internal assert would ask users to report a bug to PyTorch).
#define MLO_INTERNAL_ASSERT(cond, ...)                                                          \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      throw ::mlo::InternalError(::c10::str(                                                    \
          "mlo internal error: '", #cond, "' failed at ", __FILE__, ":", __LINE__, ": ",        \
          ::c10::str(__VA_ARGS__),                                                              \
          ". This is a bug in mlo; please report it with the config or code that triggered it")); \
    }                                                                                           \
  } while (false)
