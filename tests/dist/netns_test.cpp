// Two Gloo ranks on two network hosts: each rank runs in its own network namespace, the two
// joined by a veth pair, so rank 1 reaches rank 0's store and Gloo through MASTER_ADDR on the
// other host, not loopback. Needs root and iproute2; skipped with the reason otherwise.
#include "support/labelled_values.h"
#include "support/netns.h"
#include "support/subprocess.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace netns_test {

namespace {

using mlo_test::find_ip;
using mlo_test::Hosts;
using mlo_test::shell;
using mlo_test::values;

}  // namespace

TEST_CASE("dist: collectives over 2 Gloo ranks on two network namespaces joined by a veth pair",
          "[dist]") {
  const std::string ip = find_ip();
  if (geteuid() != 0) {
    WARN("SKIPPED: network namespaces need root (euid " << geteuid() << ")");
    return;
  }
  if (ip.empty()) {
    WARN("SKIPPED: no 'ip' program (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin");
    return;
  }
  mlo_test::delete_stale_namespaces(ip);
  std::string names[2];
  {
    Hosts hosts(ip);
    names[0] = hosts.name(0);
    names[1] = hosts.name(1);
    if (const auto why = hosts.create(); !why.empty()) {
      WARN("SKIPPED: cannot build two network namespaces joined by a veth pair: " << why);
      return;
    }
    // NOTE: a fixed port is free: each namespace starts with no sockets but its own.
    const std::string port = "29500";
    std::vector<mlo_test::Child> children;
    for (int r = 0; r < 2; ++r) {
      const std::string log = "dist_netns_" + hosts.name(r) + ".log";
      children.push_back(mlo_test::spawn(
          {ip, "netns", "exec", hosts.name(r), MLO_DIST_WORKER, "collectives", "20000"},
          {{"RANK", std::to_string(r)},
           {"WORLD_SIZE", "2"},
           {"LOCAL_RANK", "0"},  // one process per host
           {"MASTER_ADDR", hosts.address(0)},
           {"MASTER_PORT", port},
           {"GLOO_SOCKET_IFNAME", hosts.ifname(r)}},
          log));
    }
    // `ip netns exec` execs the worker in place, so each pid is the worker's own.
    std::vector<int> codes;
    std::vector<std::string> logs;
    for (auto& child : children) {
      codes.push_back(mlo_test::wait_for(child, std::chrono::seconds(40)));
      logs.push_back(mlo_test::read_file(child.log));
    }
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << " in " << hosts.name(r) << " (" << hosts.address(r) << " on "
                   << hosts.ifname(r) << "), log:\n"
                   << logs[r]);
      REQUIRE(codes[r] == 0);
      CHECK(values(logs[r], "mean_f32") == std::vector<double>{1.5, 1.5, 1.5});
      CHECK(values(logs[r], "mean_f64") == std::vector<double>{0, 1.5, 3, 4.5, 6});
      CHECK(values(logs[r], "broadcast") == std::vector<double>{17, 17, 17, 17});
      CHECK(values(logs[r], "sum_i64") == std::vector<double>{3});
    }
  }
  // The hosts are gone once out of scope.
  const auto left = shell(ip + " netns list").output;
  CHECK(left.find(names[0]) == std::string::npos);
  CHECK(left.find(names[1]) == std::string::npos);
}

}  // namespace netns_test
