#include "rendezvous_store.h"

#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>
#include <mlo/detail/torch_compat.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

namespace mlo {
namespace dist {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// A c10::Error's message without its C++ backtrace (noise in a user's log).
std::string message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head) ::freeaddrinfo(head);
  }
};

void lookup(const std::string& host, int port, const std::string& what, AddressList& list) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  const int status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list.head);
  MLO_CHECK(status == 0 && list.head != nullptr, what, "='", host, "' does not resolve to an ",
            "address (", status == 0 ? "no address" : ::gai_strerror(status),
            "); give a host name or IP address that every rank can reach");
}

std::string address_text(const sockaddr* addr) {
  char host[NI_MAXHOST] = {0};
  const socklen_t size =
      addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(addr, size, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

#if !MLO_TORCH_AT_LEAST(2, 4)
// Rank 0's pre-flight: c10d's server listens on `port` of every interface; a port that another
// program holds is an error now, naming it, not c10d's words after its logging.
void check_port_free(int port) {
  std::string failure;
  for (const int family : {AF_INET6, AF_INET}) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;  // (no IPv6 on this machine)
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_storage storage{};
    socklen_t size = 0;
    if (family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      a->sin6_addr = in6addr_any;
      size = sizeof(sockaddr_in6);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&storage);
      a->sin_family = AF_INET;
      a->sin_port = htons(static_cast<uint16_t>(port));
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      size = sizeof(sockaddr_in);
    }
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&storage), size) == 0;
    const int error = errno;
    ::close(fd);
    if (bound) return;
    failure = std::strerror(error);
    if (error == EADDRINUSE) break;
  }
  throw Error("cannot serve the rendezvous store on port " + std::to_string(port) +
              " (" + failure + "): another program holds it; choose another MASTER_PORT");
}
#endif

#if MLO_TORCH_AT_LEAST(2, 4)
// Rank 0's listening socket on the first address `host` resolves to, for c10d's server to take
// over (TCPStoreOptions::masterListenFd): the store then listens on MASTER_ADDR's address only.
int listen_on(const std::string& host, int port) {
  AddressList list;
  lookup(host, port, "MASTER_ADDR", list);
  const addrinfo* a = list.head;
  const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
  MLO_CHECK(fd >= 0, "cannot make a socket for the rendezvous store: ", std::strerror(errno));
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error("cannot serve the rendezvous store on " + address_text(a->ai_addr) + " port " +
                std::to_string(port) + " (" + std::strerror(error) + "): " +
                (error == EADDRINUSE ? "another program holds it; choose another MASTER_PORT"
                                     : "is MASTER_ADDR an address of rank 0's machine?"));
  }
  return fd;
}
#endif

// Whether a TCP connection to `address`:`port` is accepted within `wait`.
bool accepts(const addrinfo* address, std::chrono::milliseconds wait) {
  const int fd = ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          address->ai_protocol);
  if (fd < 0) return false;
  bool ok = ::connect(fd, address->ai_addr, address->ai_addrlen) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) == 1) {
      int error = 0;
      socklen_t length = sizeof(error);
      ok = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
  }
  ::close(fd);
  return ok;
}

void throw_if_stopped(const std::string& where, const char* doing) {
  if (stop_requested()) {
    throw Interrupted(where + ": stopped by a signal (SIGINT or SIGTERM) while " + doing);
  }
}

// A client's pre-flight: waits (at most `timeout`, or until a stop request) until some address
// of `host` accepts a connection on `port`: rank 0 may start later than this rank.
void wait_for_server(const std::string& host, int port, std::chrono::milliseconds timeout,
                     const std::string& where) {
  AddressList list;
  lookup(host, port, "MASTER_ADDR", list);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    for (const addrinfo* a = list.head; a != nullptr; a = a->ai_next) {
      if (accepts(a, std::chrono::milliseconds(100))) return;
    }
    throw_if_stopped(where, "waiting for rank 0's store");
    if (Clock::now() >= deadline) {
      throw Error("no rendezvous store answered at " + where + " within " +
                  std::to_string(timeout.count()) + " ms (is rank 0 running, and are " +
                  "MASTER_ADDR and MASTER_PORT its address and port?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Runs `open` (c10d's store constructor and a first exchange with the store, which block for
// ever on a peer that accepts connections and never answers) on a thread of its own, waiting
// at most `timeout` and ending at once on a stop request.
// NOTE: a join given up on leaves that thread blocked, and c10d's client connected (its
// callback thread ends the process should the peer reset the connection): the error ends the
// rank's process (mlo::guard, the mlo tool), which ends both.
c10::intrusive_ptr<c10d::Store> bounded(std::function<c10::intrusive_ptr<c10d::Store>()> open,
                                        std::chrono::milliseconds timeout,
                                        const std::string& where) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    c10::intrusive_ptr<c10d::Store> store;
    std::exception_ptr error;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, open = std::move(open)] {
    c10::intrusive_ptr<c10d::Store> store;
    std::exception_ptr error;
    try {
      store = open();
      store->check({"mlo/joined"});  // a round trip: the store answers
    } catch (...) {
      error = std::current_exception();
    }
    const std::lock_guard<std::mutex> lock(shared->mutex);
    shared->store = std::move(store);
    shared->error = error;
    shared->done = true;
    shared->done_cv.notify_all();
  }).detach();
  const auto deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(shared->mutex);
  while (!shared->done) {
    lock.unlock();
    throw_if_stopped(where, "joining the rendezvous store");
    lock.lock();
    if (Clock::now() >= deadline) {
      throw Error("the rendezvous store at " + where + " did not answer within " +
                  std::to_string(timeout.count()) + " ms: the program listening on that port " +
                  "accepts connections but is not rank 0's store (is MASTER_PORT another " +
                  "program's port?)");
    }
    shared->done_cv.wait_for(lock, std::chrono::milliseconds(20));
  }
  if (shared->error) {
    try {
      std::rethrow_exception(shared->error);
    } catch (const std::exception& e) {
      throw Error("joining the rendezvous store at " + where + " failed: " + message(e));
    }
  }
  return shared->store;
}

// A store whose waits poll `inner`, so that a stop request ends them (see the header);
// everything else goes to it as is.
class PollingStore : public c10d::Store {
 public:
  PollingStore(c10::intrusive_ptr<c10d::Store> inner, std::string where,
               std::chrono::milliseconds timeout)
      : c10d::Store(timeout), inner_(std::move(inner)), where_(std::move(where)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(key, value);
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return inner_->compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    wait({key});
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    poll_keys([&] { return inner_->check(keys); }, keys, timeout, where_);
  }
  // NOTE: a pure virtual of c10d::Store from LibTorch 2.x on, a plain member before it (hence
  // no `override`).
  c10::intrusive_ptr<c10d::Store> clone() {
    return c10::make_intrusive<PollingStore>(inner_, where_, timeout_);
  }

 private:
  c10::intrusive_ptr<c10d::Store> inner_;
  std::string where_;
};

}  // namespace

std::vector<std::string> resolve(const std::string& host, int port, const std::string& what) {
  AddressList list;
  lookup(host, port, what, list);
  std::vector<std::string> out;
  for (const addrinfo* a = list.head; a != nullptr; a = a->ai_next) {
    const std::string text = address_text(a->ai_addr);
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
  }
  return out;
}

void poll_keys(const std::function<bool()>& present, const std::vector<std::string>& keys,
               std::chrono::milliseconds timeout, const std::string& where) {
  const bool forever = timeout == c10d::Store::kNoTimeout;
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  // NOTE: polled, with a pause growing to 20 ms: a rendezvous waits for a few keys, once.
  while (!present()) {
    throw_if_stopped(where, "waiting for the other ranks");
    if (!forever && Clock::now() >= deadline) {
      std::string names;
      for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key;
      throw Error(where + " had no key " + names + " within " + std::to_string(timeout.count()) +
                  " ms (a rank did not arrive)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const Rendezvous& where,
                                                      std::chrono::milliseconds timeout) {
  const int own_port = where.own_store_port();
  const bool own = own_port > 0;
  const int port = own ? own_port : where.master_port;
  const std::string& host = where.master_addr;
  const std::string at = (own ? "" : "torchrun's store at ") + host + ":" + std::to_string(port);
  if (where.rank == 0 && !where.agent_store) {
    spdlog::info("rendezvous ({}): {} ranks; rank 0 serves the store on {}:{}", where.launcher,
                 where.world_size, host, own_port);
  } else if (where.rank == 0 && own) {
    spdlog::info("torchrun's agent serves a rendezvous store on {}:{}; the store client of "
                 "LibTorch {} cannot join the store of a torch 2.x agent, so rank 0 serves one "
                 "of its own on port {} ({})",
                 host, where.master_port, TORCH_VERSION, own_port,
                 std::getenv("MLO_STORE_PORT") ? "MLO_STORE_PORT" : "MASTER_PORT + 1");
  } else if (where.rank == 0) {
    spdlog::info("the ranks join the rendezvous store of torchrun's agent on {}:{}", host,
                 where.master_port);
  }
  try {
    resolve(host, port, "MASTER_ADDR");
    const bool serves = own && where.rank == 0;
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = serves;
    options.waitWorkers = false;
    options.timeout = timeout;
    if (serves) {
#if MLO_TORCH_AT_LEAST(2, 4)
      options.masterListenFd = listen_on(host, port);
#else
      check_port_free(port);
#endif
    } else {
      wait_for_server(host, port, timeout, at);
    }
    auto store = bounded(
        [host, options] { return c10::make_intrusive<c10d::TCPStore>(host, options); },
        timeout, at);
    if (!own) {
      store = c10::make_intrusive<c10d::PrefixStore>(
          "mlo/attempt_" + std::to_string(where.restart_count), store);
    }
    return c10::make_intrusive<PollingStore>(store, at, timeout);
  } catch (const Interrupted& e) {
    throw Interrupted("rank " + std::to_string(where.rank) + ": " + e.what());
  } catch (const Error& e) {
    throw Error("rank " + std::to_string(where.rank) + ": " + e.what());
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace mlo
