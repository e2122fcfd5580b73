// mlo on two "nodes" of two ranks each: two network namespaces joined by a veth pair
// (support/netns.h), so the ranks of one node reach the other's through its address, not
// loopback. (a) torchrun on each node, `--nnodes 2 --nproc-per-node 2` with the c10d rendezvous
// backend (one agent per node; the first node hosts the rendezvous); (b) four `mlo run`
// processes with the variables Slurm's srun sets, the store's host taken from the compressed
// host list and its port from the job id. Both end where one process on the whole batch ends.
// Needs root and iproute2 (and torchrun for (a)); skipped with the reason otherwise.
#include "support/netns.h"
#include "support/scratch.h"
#include "support/subprocess.h"
#include "support/torchrun.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace launchers_netns_test {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> hpo_args(const fs::path& out) {
  return {"run",           std::string(MLO_SOURCE_DIR) + "/configs/hpo_logreg.yaml",
          "--set",         "engine.train_iters=400",
          "--set",         "engine.timeout_s=60",
          "--no-progress", "--out",
          out.string()};
}

std::string torchrun() { return mlo_test::find_torchrun(MLO_SOURCE_DIR); }

// Why two namespaces cannot be made here, or "".
std::string unavailable(const std::string& ip) {
  if (geteuid() != 0)
    return "network namespaces need root (euid " + std::to_string(geteuid()) + ")";
  if (ip.empty()) return "no 'ip' program (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin";
  return "";
}

// The one-process reference run in `dir`/one.
void run_one(const fs::path& dir) {
  std::vector<std::string> argv{MLO_TOOL};
  for (const auto& a : hpo_args(dir / "one")) argv.push_back(a);
  const auto child = mlo_test::spawn(argv, {}, (dir / "one.log").string());
  const int code = mlo_test::wait_for(child, std::chrono::seconds(120));
  INFO(mlo_test::read_file(child.log));
  REQUIRE(code == 0);
}

// The final metrics of the run in `out` agree with the one-process run's (relative 1e-6: the
// model is float32, and 2 ranks' averaged gradients round differently from one batch's).
void check_as_one_process(const fs::path& dir, const fs::path& out) {
  const auto one = nlohmann::json::parse(mlo_test::read_file((dir / "one/results.json").string()));
  const auto got = nlohmann::json::parse(mlo_test::read_file((out / "results.json").string()));
  for (const char* section : {"valid", "test"}) {
    for (const auto& [name, value] : one[section].items()) {
      INFO(section << "/" << name);
      const double x = value.get<double>(), y = got.at(section).at(name).get<double>();
      CHECK(std::abs(x - y) <= 1e-6 * std::max(1.0, std::abs(x)));
    }
  }
  CHECK(got.at("meta").at("world_size").get<int>() == 4);
}

// After the 1-process reference run in `dir`, two hosts; null, with the reason warned, where
// they cannot be made.
std::unique_ptr<mlo_test::Hosts> two_hosts(const fs::path& dir) {
  const std::string ip = mlo_test::find_ip();
  if (const auto why = unavailable(ip); !why.empty()) {
    WARN("SKIPPED: " << why);
    return nullptr;
  }
  mlo_test::delete_stale_namespaces(ip);
  run_one(dir);
  auto hosts = std::make_unique<mlo_test::Hosts>(ip);
  if (const auto why = hosts->create(); !why.empty()) {
    WARN("SKIPPED: cannot build two network namespaces joined by a veth pair: " << why);
    return nullptr;
  }
  return hosts;
}

// Waits for every child (each bounded); on a failure prints every log.
void wait_all(std::vector<mlo_test::Child>& children, std::chrono::seconds limit) {
  std::vector<int> codes;
  for (auto& child : children) codes.push_back(mlo_test::wait_for(child, limit));
  for (size_t i = 0; i < children.size(); ++i) {
    INFO("process " << i << " log:\n" << mlo_test::read_file(children[i].log));
    CHECK(codes[i] == 0);
  }
}

}  // namespace

TEST_CASE("launchers: 2 nodes x 2 ranks under torchrun's c10d rendezvous, as one process",
          "[dist][torchrun]") {
  if (torchrun().empty()) {
    WARN(mlo_test::kNoTorchrun);
    return;
  }
  const fs::path dir = mlo_test::scratch_dir("launchers_netns_torchrun");
  const auto made = two_hosts(dir);
  if (!made) return;
  const mlo_test::Hosts& hosts = *made;
  const std::string& ip = hosts.ip();
  std::vector<mlo_test::Child> agents;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> argv{ip,
                                  "netns",
                                  "exec",
                                  hosts.name(node),
                                  torchrun(),
                                  "--nnodes",
                                  "2",
                                  "--nproc-per-node",
                                  "2",
                                  "--rdzv-backend",
                                  "c10d",
                                  "--rdzv-endpoint",
                                  hosts.address(0) + ":29400",
                                  "--rdzv-id",
                                  "mlotest",
                                  "--rdzv-conf",
                                  node == 0 ? "is_host=1" : "is_host=0",
                                  "--local-addr",
                                  hosts.address(node),
                                  "--no-python",
                                  MLO_TOOL};
    for (const auto& a : hpo_args(dir / "out")) argv.push_back(a);
    argv.insert(argv.end(), {"--set", "engine.strategy=distributed"});
    agents.push_back(mlo_test::spawn(argv, {{"GLOO_SOCKET_IFNAME", hosts.ifname(node)}},
                                     (dir / ("node" + std::to_string(node) + ".log")).string()));
  }
  wait_all(agents, std::chrono::seconds(180));
  check_as_one_process(dir, dir / "out");
}

TEST_CASE("launchers: 2 nodes x 2 ranks with the variables of Slurm's srun, as one process",
          "[dist]") {
  const fs::path dir = mlo_test::scratch_dir("launchers_netns_slurm");
  const auto made = two_hosts(dir);
  if (!made) return;
  const mlo_test::Hosts& hosts = *made;
  const std::string& ip = hosts.ip();
  // The job's nodes as Slurm compresses them: "10.77.N.[1-2]" (addresses: no name service here).
  const std::string subnet = hosts.address(0).substr(0, hosts.address(0).rfind('.') + 1);
  std::vector<mlo_test::Child> tasks;
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    std::vector<std::string> argv{ip, "netns", "exec", hosts.name(node), MLO_TOOL};
    for (const auto& a : hpo_args(dir / "out")) argv.push_back(a);
    argv.insert(argv.end(), {"--set", "engine.strategy=distributed"});
    tasks.push_back(mlo_test::spawn(argv,
                                    {{"SLURM_PROCID", std::to_string(rank)},
                                     {"SLURM_NTASKS", "4"},
                                     {"SLURM_LOCALID", std::to_string(rank % 2)},
                                     {"SLURM_NODEID", std::to_string(node)},
                                     {"SLURM_JOB_NODELIST", subnet + "[1-2]"},
                                     {"SLURM_JOB_ID", "4242"},
                                     {"GLOO_SOCKET_IFNAME", hosts.ifname(node)}},
                                    (dir / ("task" + std::to_string(rank) + ".log")).string()));
  }
  wait_all(tasks, std::chrono::seconds(180));
  check_as_one_process(dir, dir / "out");
  // Rank 0 logged where the store was: the first host, port 20000 + 4242.
  CHECK(mlo_test::read_file((dir / "out/log.txt").string()).find("Slurm (srun)") !=
        std::string::npos);
}

}  // namespace launchers_netns_test
