// The rendezvous store: c10d's store semantics across two connections, a server that listens on
// MASTER_ADDR's address only, and errors for a name that does not resolve or a port in use that
// come at once instead of after the timeout.
#include "dist/store.h"
#include "support/subprocess.h"

#include <mlo/base/error.h>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace store_test {

namespace {

using Catch::Matchers::Contains;
using mlo::dist::detail::StoreClient;
using mlo::dist::detail::StoreServer;
using std::chrono::milliseconds;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Whether a TCP connection to address:port is accepted.
bool connects(const std::string& address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("Store: set, get, add, compareSet, check, delete and wait across two clients",
          "[dist][store]") {
  const int port = mlo_test::free_port();
  StoreServer server("127.0.0.1", port);
  StoreClient a("127.0.0.1", port, milliseconds(5000));
  StoreClient b("127.0.0.1", port, milliseconds(5000));

  a.set("k", bytes("v1"));
  CHECK(b.get("k") == bytes("v1"));
  CHECK(b.check({"k"}));
  CHECK_FALSE(b.check({"k", "missing"}));
  CHECK(a.getNumKeys() == 1);

  // add keeps a decimal counter, shared by both clients.
  CHECK(a.add("n", 3) == 3);
  CHECK(b.add("n", -5) == -2);
  CHECK(a.get("n") == bytes("-2"));
  a.set("text", bytes("x"));
  CHECK_THROWS_WITH(a.add("text", 1), Contains("is not a counter"));

  // compareSet: set when the value is the expected one (or when absent and expected is empty);
  // else the current value comes back unchanged.
  CHECK(a.compareSet("c", {}, bytes("first")) == bytes("first"));
  CHECK(b.compareSet("c", bytes("other"), bytes("second")) == bytes("first"));
  CHECK(b.compareSet("c", bytes("first"), bytes("second")) == bytes("second"));
  CHECK(a.get("c") == bytes("second"));
  CHECK(a.compareSet("absent", bytes("e"), bytes("d")) == bytes("e"));
  CHECK_FALSE(a.check({"absent"}));

  CHECK(a.deleteKey("k"));
  CHECK_FALSE(a.deleteKey("k"));

  // get waits for a key another client sets later; wait gives up after its timeout.
  std::thread setter([port] {
    std::this_thread::sleep_for(milliseconds(200));
    StoreClient("127.0.0.1", port, milliseconds(5000)).set("late", bytes("here"));
  });
  CHECK(a.get("late") == bytes("here"));
  setter.join();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(b.wait({"never"}, milliseconds(300)), Contains("had no key never within 300 ms"));
  CHECK(std::chrono::steady_clock::now() - start >= milliseconds(300));

  // A value of any bytes, zeros included, travels intact.
  const std::vector<uint8_t> binary = {0, 255, 7, 0, 1};
  a.set("bin", binary);
  CHECK(b.get("bin") == binary);
  // A clone is a second connection to the same store.
  const auto clone = a.clone();
  CHECK(clone->get("bin") == binary);
}

TEST_CASE("Store: the server listens on MASTER_ADDR's address only", "[dist][store]") {
  const int port = mlo_test::free_port();
  StoreServer server("127.0.0.1", port);
  CHECK(server.listening() == std::vector<std::string>{"127.0.0.1:" + std::to_string(port)});
  CHECK(connects("127.0.0.1", port));
  // Another address of this machine (all of 127.0.0.0/8 is loopback) finds nothing there; a
  // server on every interface, c10d's TCPStore's, would answer it.
  CHECK_FALSE(connects("127.0.0.2", port));
}

TEST_CASE("Store: a name that does not resolve, a port in use, and no server are named errors",
          "[dist][store]") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(StoreClient("no-such-host.invalid", 29500, milliseconds(60000)),
                    Contains("MASTER_ADDR='no-such-host.invalid' does not resolve"));
  CHECK_THROWS_WITH(StoreServer("no-such-host.invalid", 29500),
                    Contains("MASTER_ADDR='no-such-host.invalid' does not resolve"));
  // (at once: not after the 60 s timeout)
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));

  const int port = mlo_test::free_port();
  StoreServer first("127.0.0.1", port);
  CHECK_THROWS_WITH(StoreServer("127.0.0.1", port),
                    Contains("cannot listen on MASTER_ADDR=127.0.0.1 port " +
                             std::to_string(port)) &&
                        Contains("Address already in use"));

  const int closed = mlo_test::free_port();
  CHECK_THROWS_WITH(StoreClient("127.0.0.1", closed, milliseconds(300)),
                    Contains("no rendezvous store answered at 127.0.0.1:" +
                             std::to_string(closed) + " within 300 ms"));
}

}  // namespace store_test
