#pragma once
// Part of src/dist (internal): the rendezvous store of a process group, c10d's own, chosen from
// the launch (mlo/dist/rendezvous.h):
//   - without a launcher's store, rank 0 serves a c10d TCPStore on MASTER_PORT and every rank
//     (rank 0 too) is its client;
//   - under torchrun with TORCHELASTIC_USE_AGENT_STORE=True the elastic agent already serves a
//     TCPStore on MASTER_ADDR:MASTER_PORT: where this LibTorch's client speaks the agent's
//     protocol (the 2.x lane, beside the torchrun of the same torch), every rank joins it,
//     through a c10d PrefixStore "mlo/attempt_<restart>/" so that a restarted attempt never
//     reads an earlier one's keys; LibTorch 1.13's client does not speak a 2.x server's protocol
//     (the server resets the connection), so there rank 0 serves a TCPStore of its own on
//     Rendezvous::own_store_port() (MASTER_PORT + 1, or MLO_STORE_PORT) and says so in the log.
// What c10d lacks is a thin layer around it, not a protocol of mlo's:
//   - a pre-flight check: MASTER_ADDR must resolve (else an error at once, naming it), and rank
//     0's port must be free (else an error at once, naming it);
//   - a bounded join: a client connects within the timeout, and its first exchange with the
//     store must complete within it too, so a program that accepts connections on MASTER_PORT
//     and never answers ends the rank with an error naming the address, instead of a hang;
//   - waits that a stop request (SIGINT, SIGTERM: base/stop_request.h) ends at once with
//     `mlo::Interrupted`, the join and every later `get`/`wait` of the store alike.
// Rank 0's server listens on MASTER_ADDR's address alone where c10d takes a listening socket
// (TCPStoreOptions::masterListenFd, LibTorch 2.4 on: the 2.x lane); 1.13's TCPStore binds the
// wildcard address itself, so there it listens on every interface (docs/distributed.md, "The
// rendezvous store").

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <mlo/dist/rendezvous.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace mlo {
namespace dist {
namespace detail {

/// Opens `where`'s store as described above, waiting at most `timeout` for rank 0's server.
/// Throws `mlo::Error` starting "rank r: " (a name that does not resolve, a port in use, no
/// store answering in time), or `mlo::Interrupted` on a stop request.
c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const Rendezvous& where,
                                                      std::chrono::milliseconds timeout);

/// The addresses `host` resolves to for TCP on `port`, as text ("127.0.0.1", "::1"); throws
/// `mlo::Error` naming `what` ("MASTER_ADDR") and the resolver's reason when it resolves to none.
std::vector<std::string> resolve(const std::string& host, int port, const std::string& what);

/// Polls `present` (a pause growing to 20 ms) until it holds: the waits of a rendezvous. Throws
/// `mlo::Interrupted` once a stop is requested (a signal), and `mlo::Error` naming `where` and
/// `keys` after `timeout` (c10d's `kNoTimeout`: no limit).
void poll_keys(const std::function<bool()>& present, const std::vector<std::string>& keys,
               std::chrono::milliseconds timeout, const std::string& where);

}  // namespace detail
}  // namespace dist
}  // namespace mlo
