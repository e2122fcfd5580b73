// Two Gloo ranks on two network hosts: each rank runs in its own network namespace, the two
// joined by a veth pair, so rank 1 reaches rank 0's store and Gloo through MASTER_ADDR on the
// other host, not loopback. Needs root and iproute2; skipped with the reason otherwise.
#include "support/labelled_values.h"
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

using mlo_test::values;

struct Shell {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell; names in it are the test's own (no quoting needed).
Shell shell(const std::string& command) {
  Shell result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) result.output += buffer;
  const int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// The `ip` program, or "" when iproute2 is not installed.
std::string find_ip() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

constexpr const char* kPrefix = "mlotest_";

// Deletes namespaces left by an earlier run of this test that was killed (its pid is gone).
void delete_stale_namespaces(const std::string& ip) {
  std::istringstream names(shell(ip + " netns list").output);
  for (std::string line; std::getline(names, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::string(kPrefix).size(), nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      shell(ip + " netns delete " + name);
    }
  }
}

// Two namespaces joined by a veth pair, deleted on destruction (also when the test fails):
// deleting a namespace deletes the veth end in it, and with it the pair.
class Hosts {
 public:
  explicit Hosts(std::string ip) : ip_(std::move(ip)) {
    const std::string id = std::to_string(getpid());
    // NOTE: inside the namespaces the addresses and names are private; the pid keeps concurrent
    // runs (other build trees) apart in `ip netns list` and in the root's interface names.
    names_ = {kPrefix + id + "_a", kPrefix + id + "_b"};
    ifnames_ = {"mloa" + id, "mlob" + id};  // at most 15 characters (IFNAMSIZ)
    const std::string subnet = "10.77." + std::to_string(getpid() % 250 + 1) + ".";
    addresses_ = {subnet + "1", subnet + "2"};
  }
  ~Hosts() {
    for (const auto& name : created_) shell(ip_ + " netns delete " + name);
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  // Builds the two hosts; "" on success, else why not (the failing command and its output).
  std::string create() {
    for (const auto& name : names_) {
      if (auto why = run("netns add " + name); !why.empty()) return why;
      created_.push_back(name);
    }
    const std::vector<std::string> steps = {
        "-n " + names_[0] + " link add " + ifnames_[0] + " type veth peer name " + ifnames_[1] +
            " netns " + names_[1],
        "-n " + names_[0] + " addr add " + addresses_[0] + "/24 dev " + ifnames_[0],
        "-n " + names_[1] + " addr add " + addresses_[1] + "/24 dev " + ifnames_[1],
        "-n " + names_[0] + " link set lo up",
        "-n " + names_[1] + " link set lo up",
        "-n " + names_[0] + " link set " + ifnames_[0] + " up",
        "-n " + names_[1] + " link set " + ifnames_[1] + " up"};
    for (const auto& step : steps) {
      if (auto why = run(step); !why.empty()) return why;
    }
    return "";
  }

  const std::string& ip() const { return ip_; }
  const std::string& name(int host) const { return names_[host]; }
  const std::string& ifname(int host) const { return ifnames_[host]; }
  const std::string& address(int host) const { return addresses_[host]; }

 private:
  std::string run(const std::string& args) {
    const auto result = shell(ip_ + " " + args);
    if (result.code == 0) return "";
    return "'ip " + args + "' failed (exit " + std::to_string(result.code) + "): " + result.output;
  }

  std::string ip_;
  std::vector<std::string> names_, ifnames_, addresses_, created_;
};

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
  delete_stale_namespaces(ip);
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
