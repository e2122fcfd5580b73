#pragma once
// Test helper: two network "hosts" for tests of several machines, each a network namespace,
// joined by a veth pair, with addresses 10.77.<pid % 250 + 1>.1 and .2 (needs root and
// iproute2). Deleted on destruction, also when a test fails; namespaces left by a killed run
// are deleted by the next (delete_stale_namespaces).

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mlo_test {

struct Shell {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell; names in it are the test's own (no quoting needed).
inline Shell shell(const std::string& command) {
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
inline std::string find_ip() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

inline constexpr const char* kPrefix = "mlotest_";

// Deletes namespaces left by an earlier run of this test that was killed (its pid is gone).
inline void delete_stale_namespaces(const std::string& ip) {
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

}  // namespace mlo_test
