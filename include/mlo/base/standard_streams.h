#pragma once
/// \file
/// What a long run needs of its standard streams: that writing to them can never end it, and
/// that the files it opens never become them.

namespace mlo {

/// Opens /dev/null on each of descriptors 0, 1 and 2 that is closed (a program started with
/// `2>&-`), so that no file the run opens later (its folder's lock, its log) is taken for a
/// standard stream; and ignores SIGPIPE, so that a console that went away (`| head -1`) makes
/// the writes to it fail quietly while the run goes on and saves its state, instead of ending
/// the process. `mlo::Run::start` and `mlo::cli::main` call it; idempotent.
void guard_standard_streams();

}  // namespace mlo
