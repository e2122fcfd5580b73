#pragma once
// A small HTTP server on 127.0.0.1 for download tests: serves fixed bodies by path from a thread
// of its own, on a port the kernel picks, and stops with the object. A route can announce more
// bytes than it sends (a truncated transfer), stall before closing, run a callback before it
// answers, or answer with an error status. Bounded: it accepts only after poll says a client is
// waiting, reads with a 2 s poll, sends with a 2 s send timeout, and stops when its object goes
// out of scope.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace mlo_test {

/// What the server answers on one path.
struct HttpRoute {
  HttpRoute(std::string body_ = "", int status_ = 200, long send_bytes_ = -1, int stall_ms_ = 0,
            std::function<void()> before_ = {})
      : body(std::move(body_)),
        status(status_),
        send_bytes(send_bytes_),
        stall_ms(stall_ms_),
        before(std::move(before_)) {}
  std::string body;
  int status = 200;
  /// Bytes of `body` actually sent before the connection closes; -1: all of them. The
  /// Content-Length header always announces the whole body.
  long send_bytes = -1;
  /// Milliseconds to wait, silent, after sending and before closing (a stalled server).
  int stall_ms = 0;
  /// Runs before the answer is sent (another process's doing, say).
  std::function<void()> before;
};

class HttpServer {
 public:
  HttpServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listener_ < 0) throw std::runtime_error("HttpServer: socket() failed");
    const int on = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(listener_, 8) != 0) {
      ::close(listener_);
      throw std::runtime_error("HttpServer: cannot listen on 127.0.0.1");
    }
    socklen_t size = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HttpServer() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Serves `route` at `path` ("/cifar.tar.gz").
  void add(const std::string& path, HttpRoute route) {
    std::lock_guard<std::mutex> lock(mutex_);
    routes_[path] = std::move(route);
  }
  /// "http://127.0.0.1:PORT" + path.
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  /// Requests answered so far (any path).
  int requests() const { return requests_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd waiting{listener_, POLLIN, 0};
      if (::poll(&waiting, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      timeval timeout{2, 0};
      ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
      answer(client);
      ::close(client);
    }
  }

  void answer(int client) {
    std::string request;
    char buffer[4096];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
      pollfd readable{client, POLLIN, 0};
      if (::poll(&readable, 1, 2000) <= 0) return;  // a client that says nothing is dropped
      const ssize_t n = ::recv(client, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<size_t>(n));
    }
    ++requests_;
    // "GET /path HTTP/1.1"
    const auto first = request.find(' ');
    const auto second = request.find(' ', first + 1);
    const std::string path = request.substr(first + 1, second - first - 1);
    HttpRoute route{"not found", 404, -1};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = routes_.find(path);
      if (found != routes_.end()) route = found->second;
    }
    const std::string head = "HTTP/1.1 " + std::to_string(route.status) +
                             (route.status == 200 ? " OK" : " Error") +
                             "\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
                             std::to_string(route.body.size()) + "\r\nConnection: close\r\n\r\n";
    const size_t count = route.send_bytes < 0
                             ? route.body.size()
                             : std::min(route.body.size(), static_cast<size_t>(route.send_bytes));
    if (route.before) route.before();
    send_all(client, head.data(), head.size());
    send_all(client, route.body.data(), count);
    // The stall ends early when the server stops (the client gave up and the test ended).
    for (int waited = 0; waited < route.stall_ms && !stop_; waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  static void send_all(int client, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(client, data, size, MSG_NOSIGNAL);
      if (n <= 0) return;
      data += n;
      size -= static_cast<size_t>(n);
    }
  }

  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  std::map<std::string, HttpRoute> routes_;
  std::thread thread_;
};

}  // namespace mlo_test
