#pragma once
// Part of src/dist (internal): the rendezvous store of a process group, chosen from the launch
// (mlo/dist/rendezvous.h). Without a launcher's store, rank 0 serves mlo's own (store.h) on
// MASTER_PORT and every rank is its client. Under torchrun with TORCHELASTIC_USE_AGENT_STORE=True
// the elastic agent already serves a c10d TCPStore on MASTER_ADDR:MASTER_PORT:
//   - where this LibTorch's TCPStore client speaks the agent's protocol (the 2.x lane, beside the
//     torchrun of the same torch), every rank joins it as a client, its keys under
//     "mlo/attempt_<restart>/" so that a restarted attempt never reads an earlier one's keys;
//   - LibTorch 1.13's client does not speak a 2.x server's protocol (the server resets the
//     connection), so there rank 0 serves mlo's own store on Rendezvous::own_store_port()
//     (MASTER_PORT + 1, or MLO_STORE_PORT), and says so in the log.
// The waits of either end at once with `mlo::Interrupted` when a stop is requested (a signal).

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "store.h"

#include <mlo/dist/rendezvous.h>

#include <chrono>
#include <memory>
#include <string>

namespace mlo {
namespace dist {
namespace detail {

/// A rank's rendezvous store, and rank 0's server when the store is mlo's own.
struct RendezvousStore {
  std::unique_ptr<StoreServer> server;
  c10::intrusive_ptr<c10d::Store> store;
};

/// Opens `where`'s store as described above, waiting at most `timeout` for rank 0's server.
/// Throws `mlo::Error` starting "rank r: " (a port in use, a name that does not resolve, no
/// server), or `mlo::Interrupted` on a stop request.
RendezvousStore open_rendezvous_store(const Rendezvous& where, std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace dist
}  // namespace mlo
