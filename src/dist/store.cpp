#include "store.h"

#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mlo {
namespace dist {
namespace detail {
namespace {

// The wire format: a request is an operation byte and its arguments, a reply a status byte and
// its values; arguments and values are counted byte strings (u32 count, then u64 length and the
// bytes of each), in network order.
enum Op : uint8_t { kSet = 1, kCompareSet, kGetIfPresent, kAdd, kDelete, kCheck, kNumKeys };
enum Status : uint8_t { kOk = 0, kAbsent = 1, kBad = 2 };

// Far above what a rendezvous exchanges (addresses, NCCL ids): a bound on what a bad peer makes
// the server allocate.
constexpr uint64_t kMaxBytes = uint64_t{1} << 26;
constexpr uint32_t kMaxArgs = 1 << 16;

using Bytes = std::vector<uint8_t>;

bool read_all(int fd, void* data, size_t size) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool write_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void put_u32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
void put_u64(Bytes& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
uint64_t get_be(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

// One message: a header byte and counted byte strings.
bool send_message(int fd, uint8_t head, const std::vector<Bytes>& parts) {
  Bytes out{head};
  put_u32(out, static_cast<uint32_t>(parts.size()));
  for (const auto& part : parts) {
    put_u64(out, part.size());
    out.insert(out.end(), part.begin(), part.end());
  }
  return write_all(fd, out.data(), out.size());
}

bool receive_message(int fd, uint8_t& head, std::vector<Bytes>& parts) {
  uint8_t header[5];
  if (!read_all(fd, header, sizeof(header))) return false;
  head = header[0];
  const auto count = static_cast<uint32_t>(get_be(header + 1, 4));
  if (count > kMaxArgs) return false;
  parts.assign(count, Bytes());
  uint64_t total = 0;
  for (auto& part : parts) {
    uint8_t length[8];
    if (!read_all(fd, length, sizeof(length))) return false;
    const uint64_t size = get_be(length, 8);
    total += size;
    if (size > kMaxBytes || total > kMaxBytes) return false;
    part.resize(size);
    if (size > 0 && !read_all(fd, part.data(), size)) return false;
  }
  return true;
}

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text_of(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::string address_text(const sockaddr* addr) {
  char host[NI_MAXHOST] = {0};
  const socklen_t size =
      addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(addr, size, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
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

StoreServer::StoreServer(const std::string& host, int port) {
  AddressList list;
  lookup(host, port, "MASTER_ADDR", list);
  std::string failures;
  bool in_use = false;
  for (const addrinfo* a = list.head; a != nullptr; a = a->ai_next) {
    const std::string text = address_text(a->ai_addr) + ":" + std::to_string(port);
    if (std::find(listening_.begin(), listening_.end(), text) != listening_.end()) continue;
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    // (an IPv6 address listens for IPv6 only: the IPv4 ones have sockets of their own)
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      in_use = in_use || errno == EADDRINUSE;
      failures += (failures.empty() ? "" : "; ") + text + ": " + std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fds_.push_back(fd);
    listening_.push_back(text);
  }
  // An address of the name's that is not this machine's (an IPv6 one where IPv6 is off, say)
  // is let go; a port taken on any of them is an error, as is no address bound at all.
  if (listen_fds_.empty() || in_use) {
    for (int fd : listen_fds_) ::close(fd);
    throw Error("rank 0: the rendezvous store cannot listen on MASTER_ADDR=" + host + " port " +
                std::to_string(port) + " (" + failures +
                "); is the port free, and is MASTER_ADDR an address of rank 0's machine?");
  }
  MLO_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "rank 0: the rendezvous store cannot make a pipe: ",
            std::strerror(errno));
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  const char stop = 1;
  if (::write(wake_[1], &stop, 1) < 0) {
    // (the accept loop also ends when its descriptors close below)
  }
  if (acceptor_.joinable()) acceptor_.join();
  // No handler starts once the acceptor has ended; each one ends with its connection.
  for (auto& handler : handlers_) {
    if (handler.joinable()) handler.join();
  }
  for (int fd : client_fds_) ::close(fd);
  for (int fd : listen_fds_) ::close(fd);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void StoreServer::accept_loop() {
  std::vector<pollfd> fds;
  for (int fd : listen_fds_) fds.push_back({fd, POLLIN, 0});
  fds.push_back({wake_[0], POLLIN, 0});
  while (true) {
    const int ready = ::poll(fds.data(), fds.size(), -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || fds.back().revents != 0) return;
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      const int client = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int on = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        ::close(client);
        return;
      }
      client_fds_.push_back(client);
      handlers_.emplace_back([this, client] { serve(client); });
    }
  }
}

void StoreServer::serve(int fd) {
  uint8_t op = 0;
  std::vector<Bytes> args;
  // A peer that breaks the format loses its connection; the store goes on for the others.
  while (receive_message(fd, op, args)) {
    std::vector<Bytes> reply;
    uint8_t status = kOk;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto arg = [&](size_t i) { return text_of(args[i]); };
      switch (op) {
        case kSet:
          if (args.size() != 2) return;
          values_[arg(0)] = args[1];
          break;
        case kCompareSet: {
          if (args.size() != 3) return;
          const auto found = values_.find(arg(0));
          if (found == values_.end()) {
            if (args[1].empty()) values_[arg(0)] = args[2];
            reply.push_back(args[1].empty() ? args[2] : args[1]);
          } else if (found->second == args[1]) {
            found->second = args[2];
            reply.push_back(args[2]);
          } else {
            reply.push_back(found->second);
          }
          break;
        }
        case kGetIfPresent: {
          if (args.size() != 1) return;
          const auto found = values_.find(arg(0));
          if (found == values_.end()) {
            status = kAbsent;
          } else {
            reply.push_back(found->second);
          }
          break;
        }
        case kAdd: {
          if (args.size() != 2) return;
          int64_t delta = 0;
          try {
            delta = std::stoll(arg(1));
          } catch (const std::exception&) {
            return;
          }
          int64_t value = 0;
          const auto found = values_.find(arg(0));
          if (found != values_.end()) {
            try {
              value = std::stoll(text_of(found->second));
            } catch (const std::exception&) {
              status = kBad;  // a key set to something other than a counter
            }
          }
          if (status == kOk && __builtin_add_overflow(value, delta, &value)) status = kBad;
          if (status == kOk) {
            values_[arg(0)] = bytes_of(std::to_string(value));
            reply.push_back(bytes_of(std::to_string(value)));
          }
          break;
        }
        case kDelete:
          if (args.size() != 1) return;
          status = values_.erase(arg(0)) > 0 ? kOk : kAbsent;
          break;
        case kCheck:
          for (const auto& key : args) {
            if (!values_.count(text_of(key))) status = kAbsent;
          }
          break;
        case kNumKeys:
          reply.push_back(bytes_of(std::to_string(values_.size())));
          break;
        default:
          return;
      }
    }
    if (!send_message(fd, status, reply)) return;
  }
}

StoreClient::StoreClient(std::string host, int port, std::chrono::milliseconds timeout)
    : c10d::Store(timeout), host_(std::move(host)), port_(port) {
  AddressList list;
  lookup(host_, port_, "MASTER_ADDR", list);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "not tried";
  // Rank 0 may come up later than this rank: refused connections are retried until the timeout.
  while (true) {
    for (const addrinfo* a = list.head; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        fd_ = fd;
      } else {
        last = address_text(a->ai_addr) + ":" + std::to_string(port_) + ": " +
               std::strerror(errno);
        ::close(fd);
      }
    }
    if (fd_ >= 0) return;
    if (stop_requested()) {
      throw Interrupted("stopped by a signal (SIGINT or SIGTERM) while waiting for the "
                        "rendezvous store at " + host_ + ":" + std::to_string(port_));
    }
    MLO_CHECK(std::chrono::steady_clock::now() < deadline, "no rendezvous store answered at ",
              host_, ":", port_, " within ", timeout.count(), " ms (", last,
              "); is rank 0 up and reachable?");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<Bytes> StoreClient::call(uint8_t op, const std::vector<Bytes>& args,
                                     const std::string& refused) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint8_t status = 0;
  std::vector<Bytes> reply;
  MLO_CHECK(send_message(fd_, op, args) && receive_message(fd_, status, reply),
            "the rendezvous store at ", host_, ":", port_, " closed the connection (rank 0 ",
            "ended?)");
  if (status == kAbsent) return {};
  MLO_CHECK(status == kOk, "the rendezvous store at ", host_, ":", port_, " ", refused);
  if (reply.empty()) reply.emplace_back();  // (an answer without a value: present)
  return reply;
}

void StoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  call(kSet, {bytes_of(key), value});
}

std::vector<uint8_t> StoreClient::compareSet(const std::string& key,
                                             const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  return call(kCompareSet, {bytes_of(key), expected, desired}).at(0);
}

std::vector<uint8_t> StoreClient::get(const std::string& key) {
  wait({key});
  const auto reply = call(kGetIfPresent, {bytes_of(key)});
  MLO_CHECK(!reply.empty(), "the rendezvous store lost key '", key, "'");
  return reply[0];
}

int64_t StoreClient::add(const std::string& key, int64_t value) {
  const auto reply = call(kAdd, {bytes_of(key), bytes_of(std::to_string(value))},
                          "refused to add to key '" + key +
                              "': it is not a counter, or the sum overflows");
  MLO_CHECK(!reply.empty(), "the rendezvous store's key '", key, "' is not a counter");
  return std::stoll(text_of(reply[0]));
}

bool StoreClient::deleteKey(const std::string& key) {
  return !call(kDelete, {bytes_of(key)}).empty();
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  std::vector<Bytes> args;
  for (const auto& key : keys) args.push_back(bytes_of(key));
  return !call(kCheck, args).empty();
}

int64_t StoreClient::getNumKeys() { return std::stoll(text_of(call(kNumKeys, {}).at(0))); }

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void StoreClient::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  poll_keys([&] { return check(keys); }, keys, timeout,
            "the rendezvous store at " + host_ + ":" + std::to_string(port_));
}

void poll_keys(const std::function<bool()>& present, const std::vector<std::string>& keys,
               std::chrono::milliseconds timeout, const std::string& where) {
  const bool forever = timeout == c10d::Store::kNoTimeout;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  // NOTE: polled, with a pause growing to 20 ms: a rendezvous waits for a few keys, once.
  while (!present()) {
    if (stop_requested()) {
      throw Interrupted(where + ": stopped by a signal (SIGINT or SIGTERM) while waiting for "
                        "the other ranks");
    }
    if (!forever && std::chrono::steady_clock::now() >= deadline) {
      std::string names;
      for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key;
      throw Error(where + " had no key " + names + " within " + std::to_string(timeout.count()) +
                  " ms (a rank did not arrive)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

c10::intrusive_ptr<c10d::Store> StoreClient::clone() {
  return c10::make_intrusive<StoreClient>(host_, port_, timeout_);
}

}  // namespace detail
}  // namespace dist
}  // namespace mlo
