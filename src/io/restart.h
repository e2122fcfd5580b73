#pragma once
// Part of src/io (internal): what a worker that its launcher restarted after a failure (torchrun
// --max-restarts, mlo launch --max-restarts: a restart count above 0) does with its run folder.
// It resumes when the run saved a state (rank 0's: state.pt, or under zero state.rank0.pt, or
// its previous one) and, as far as this rank can tell, the run is this launch's: rank 0 checks
// that the folder's lock names the same launcher process (a folder of someone else's, which the
// first attempt refused, stays refused); the other ranks, whose launcher may be another node's
// agent, follow the saved state, and rank 0's refusal ends the launch. A restart of this launch
// with no state saved starts over, the failed attempt's files moved aside.

#include <mlo/dist/rendezvous.h>
#include <mlo/io/run.h>

namespace mlo {
namespace io {

/// `options` as a restart described above applies them (`resume`, or `overwrite` to start
/// over); unchanged outside a restart, or when `options` already resume.
RunOptions restarted(const dist::Rendezvous& where, RunOptions options);

}  // namespace io
}  // namespace mlo
