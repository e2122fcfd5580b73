#pragma once
/// \file
/// Errors, in the base layer (every area may use it; it depends on nothing else of mlo):
/// `MLO_CHECK` for mistakes a user can make (bad config, bad graph, bad input),
/// `MLO_INTERNAL_ASSERT` for invariants of mlo itself.

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <stdexcept>
#include <string>

namespace mlo {

/// Thrown for user and configuration errors. The message names the problem, field and value.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
