#pragma once
// Part of src/dist (internal): the rendezvous store of a process group, mlo's own in place of
// c10d's TCPStore, whose server listens on every interface. Rank 0 runs a `StoreServer` that
// listens on the addresses MASTER_ADDR resolves to and nowhere else (loopback for 127.0.0.1 or
// localhost); every rank, rank 0 included, talks to it through a `StoreClient`, a c10d::Store
// that Gloo and NCCL rendezvous through. Keys hold bytes; `add` keeps its counter as decimal
// text, as c10d's stores do. A name that does not resolve, or a port in use, is an error at
// once, not after the rendezvous timeout.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mlo {
namespace dist {
namespace detail {

/// The addresses `host` resolves to for TCP on `port`, as text ("127.0.0.1", "::1"); throws
/// `mlo::Error` naming `what` ("MASTER_ADDR") and the resolver's reason when it resolves to none.
std::vector<std::string> resolve(const std::string& host, int port, const std::string& what);

/// Polls `present` (a pause growing to 20 ms) until it holds: the waits of a rendezvous. Throws
/// `mlo::Interrupted` once a stop is requested (a signal), and `mlo::Error` naming `where` and
/// `keys` after `timeout` (c10d's `kNoTimeout`: no limit).
void poll_keys(const std::function<bool()>& present, const std::vector<std::string>& keys,
               std::chrono::milliseconds timeout, const std::string& where);

/// The store's server: a key-value map served over TCP on `host`'s addresses only, one thread
/// per connection, until destroyed.
class StoreServer {
 public:
  /// Listens on `port` of every address `host` resolves to; throws `mlo::Error` naming host and
  /// port when one cannot be bound (in use, not an address of this machine).
  StoreServer(const std::string& host, int port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The addresses it listens on, "address:port" each.
  const std::vector<std::string>& listening() const { return listening_; }

 private:
  void accept_loop();
  void serve(int fd);

  std::vector<int> listen_fds_;
  std::vector<std::string> listening_;
  int wake_[2] = {-1, -1};  // a pipe whose write end stops accept_loop
  std::thread acceptor_;
  std::mutex mutex_;  // guards what follows
  std::map<std::string, std::vector<uint8_t>> values_;
  std::vector<int> client_fds_;
  std::vector<std::thread> handlers_;
  bool stopping_ = false;
};

/// A c10d::Store backed by a `StoreServer` at host:port. Connecting retries until the timeout
/// (rank 0 may start later); `get` and `wait` wait for their keys up to the timeout. Both
/// waits end at once with `mlo::Interrupted` when a stop is requested.
class StoreClient : public c10d::Store {
 public:
  StoreClient(std::string host, int port, std::chrono::milliseconds timeout);
  ~StoreClient() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // NOTE: a pure virtual of c10d::Store from LibTorch 2.x on, a plain member before it (hence
  // no `override`): a second connection to the same server.
  c10::intrusive_ptr<c10d::Store> clone();

 private:
  // Sends one request; its answer's values (none: the key is absent). `refused`: what a
  // refusal means, for the error.
  std::vector<std::vector<uint8_t>> call(uint8_t op, const std::vector<std::vector<uint8_t>>& args,
                                         const std::string& refused = "refused a request");

  std::string host_;
  int port_;
  int fd_ = -1;
  std::mutex mutex_;  // one request at a time on the connection
};

}  // namespace detail
}  // namespace dist
}  // namespace mlo
