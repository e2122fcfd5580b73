#pragma once
/// \file
/// A process-wide request to stop. A run's handlers of SIGINT and SIGTERM raise it; code that
/// waits on other processes (the rendezvous of a process group) polls it, so that a signal ends
/// such a wait at once, not after its timeout, by throwing `mlo::Interrupted`.

#include <mlo/base/error.h>

namespace mlo {

/// Raises the request. Async-signal-safe: a signal handler may call it.
void request_stop() noexcept;
/// Lowers the request (a run does at its start).
void clear_stop_request() noexcept;
/// Whether the request is raised.
bool stop_requested() noexcept;

/// What a wait throws when the request is raised. A program's `main` (`mlo::guard`, the `mlo`
/// tool) turns it into exit status 130, as a shell expects of an interrupted job.
class Interrupted : public Error {
 public:
  using Error::Error;
};

}  // namespace mlo
