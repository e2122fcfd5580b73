// Who a process is in a launch (mlo::dist::Rendezvous::from_env): the launchers' variables in
// their order of precedence, Slurm's compressed host lists, the store port under Slurm and
// beside torchrun's agent store, and a named error for each malformed value.
#include <mlo/base/error.h>
#include <mlo/detail/torch_compat.h>
#include <mlo/dist/rendezvous.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace rendezvous_test {

namespace {

using Catch::Matchers::Contains;
using mlo::dist::expand_host_list;
using mlo::dist::Rendezvous;

const std::vector<const char*> kVariables = {"RANK",
                                             "WORLD_SIZE",
                                             "LOCAL_RANK",
                                             "GROUP_RANK",
                                             "MASTER_ADDR",
                                             "MASTER_PORT",
                                             "TORCHELASTIC_RUN_ID",
                                             "TORCHELASTIC_RESTART_COUNT",
                                             "TORCHELASTIC_USE_AGENT_STORE",
                                             "MLO_RESTART_COUNT",
                                             "MLO_STORE_PORT",
                                             "SLURM_PROCID",
                                             "SLURM_NTASKS",
                                             "SLURM_LOCALID",
                                             "SLURM_NODEID",
                                             "SLURM_JOB_NODELIST",
                                             "SLURM_NODELIST",
                                             "SLURM_JOB_ID",
                                             "SLURM_JOBID",
                                             "SLURM_STEP_ID",
                                             "SLURM_STEP_NUM_TASKS",
                                             "SLURM_STEP_NODELIST"};

// Sets exactly `values` among the launch variables for its lifetime; the rest are unset.
class Environment {
 public:
  explicit Environment(const std::map<std::string, std::string>& values) {
    for (const char* name : kVariables) {
      if (const char* old = std::getenv(name)) saved_[name] = old;
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ~Environment() {
    for (const char* name : kVariables) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

}  // namespace

TEST_CASE("rendezvous: Slurm host lists expand as Slurm writes them", "[dist]") {
  using V = std::vector<std::string>;
  CHECK(expand_host_list("node7") == V{"node7"});
  CHECK(expand_host_list("a,b,c") == V{"a", "b", "c"});
  CHECK(expand_host_list("gnode[10,20,25,37]") == V{"gnode10", "gnode20", "gnode25", "gnode37"});
  CHECK(expand_host_list("n[01-03,7]") == V{"n01", "n02", "n03", "n7"});
  CHECK(expand_host_list("n[098-101]") == V{"n098", "n099", "n100", "n101"});
  CHECK(expand_host_list("gpu[1-2],cpu5,io[3]") == V{"gpu1", "gpu2", "cpu5", "io3"});
  CHECK(expand_host_list("r[1-2]-n[1-2].lan") ==
        V{"r1-n1.lan", "r1-n2.lan", "r2-n1.lan", "r2-n2.lan"});
  for (const std::string bad :
       {"", "a,,b", "n[1-3", "n1-3]", "n[3-1]", "n[]", "n[a-b]", "n[[1]]", "n[1-2,]"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(expand_host_list(bad), Contains("SLURM_JOB_NODELIST='" + bad + "'"));
  }
  CHECK_THROWS_WITH(expand_host_list("n[0-99999999]"), Contains("more than"));
}

TEST_CASE("rendezvous: no launcher is one process", "[dist]") {
  Environment env({});
  const auto r = Rendezvous::from_env();
  CHECK(r.rank == 0);
  CHECK(r.world_size == 1);
  CHECK(r.restart_count == 0);
  CHECK_FALSE(r.agent_store);
  CHECK(r.launcher == "one process");
}

TEST_CASE("rendezvous: torchrun's variables", "[dist]") {
  Environment env({{"RANK", "3"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"GROUP_RANK", "1"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29400"},
                   {"TORCHELASTIC_RUN_ID", "job"},
                   {"TORCHELASTIC_RESTART_COUNT", "2"},
                   {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                   // Slurm's, under torchrun inside an allocation: torchrun's win
                   {"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"}});
  const auto r = Rendezvous::from_env();
  CHECK(r.rank == 3);
  CHECK(r.world_size == 4);
  CHECK(r.local_rank == 1);
  CHECK(r.node_rank == 1);
  CHECK(r.master_addr == "10.0.0.1");
  CHECK(r.master_port == 29400);
  CHECK(r.launcher == "torchrun");
  CHECK_FALSE(r.from_scheduler);
  CHECK(r.restart_count == 2);
  CHECK(r.agent_store);
#if MLO_TORCH_AT_LEAST(2, 0)
  CHECK(r.own_store_port() == -1);  // the agent's store is joined
#else
  CHECK(r.own_store_port() == 29401);  // mlo's own beside it
  setenv("MLO_STORE_PORT", "31000", 1);
  CHECK(r.own_store_port() == 31000);
#endif
}

TEST_CASE("rendezvous: mlo launch's variables, and a store of mlo's own", "[dist]") {
  Environment env(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}, {"MLO_RESTART_COUNT", "1"}});
  const auto r = Rendezvous::from_env();
  CHECK(r.launcher == "mlo launch");
  CHECK(r.restart_count == 1);
  CHECK(r.local_rank == 1);  // LOCAL_RANK unset: the rank
  CHECK_FALSE(r.agent_store);
  CHECK(r.own_store_port() == 4000);
}

TEST_CASE("rendezvous: Slurm's variables without a launcher's", "[dist]") {
  SECTION("rank, size, local rank, node; the first host and the job's port") {
    Environment env({{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_NODEID", "2"},
                     {"SLURM_JOB_NODELIST", "gpu[07-10]"},
                     {"SLURM_JOB_ID", "123456"}});
    const auto r = Rendezvous::from_env();
    CHECK(r.launcher == "Slurm (srun)");
    CHECK(r.rank == 5);
    CHECK(r.world_size == 8);
    CHECK(r.local_rank == 1);
    CHECK(r.node_rank == 2);
    CHECK(r.master_addr == "gpu07");
    CHECK(r.master_port == mlo::dist::kSlurmPortBase + 123456 % mlo::dist::kSlurmPortSpan);
    CHECK(r.master_port == 23456);
    CHECK(r.from_scheduler);
  }
  SECTION("an srun step: its own size, nodes and port") {
    Environment env({{"SLURM_PROCID", "1"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_JOB_ID", "123456"},
                     {"SLURM_STEP_ID", "2"},
                     {"SLURM_STEP_NUM_TASKS", "2"},
                     {"SLURM_JOB_NODELIST", "gpu[07-10]"},
                     {"SLURM_STEP_NODELIST", "gpu[09-10]"}});
    const auto r = Rendezvous::from_env();
    CHECK(r.world_size == 2);
    CHECK(r.master_addr == "gpu09");
    CHECK(r.master_port == 20000 + (123456 + 2000) % 10000);
  }
  SECTION("MASTER_ADDR and MASTER_PORT win over the host list and the job id") {
    Environment env({{"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_JOB_NODELIST", "a[1-2]"},
                     {"SLURM_JOB_ID", "7"},
                     {"MASTER_ADDR", "b9"},
                     {"MASTER_PORT", "555"}});
    const auto r = Rendezvous::from_env();
    CHECK(r.master_addr == "b9");
    CHECK(r.master_port == 555);
  }
  SECTION("no host list and no MASTER_ADDR: a named error") {
    Environment env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "7"}});
    CHECK_THROWS_WITH(Rendezvous::from_env(),
                      Contains("SLURM_JOB_NODELIST") && Contains("MASTER_ADDR"));
  }
  SECTION("a bad host list names the variable") {
    Environment env({{"SLURM_PROCID", "1"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_JOB_ID", "7"},
                     {"SLURM_JOB_NODELIST", "n[2-1]"}});
    CHECK_THROWS_WITH(Rendezvous::from_env(), Contains("SLURM_JOB_NODELIST='n[2-1]'"));
  }
  SECTION("one task needs no store") {
    Environment env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
    CHECK(Rendezvous::from_env().world_size == 1);
  }
}

TEST_CASE("rendezvous: malformed values are named errors", "[dist]") {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK='2'"},
      {{{"RANK", "0"}}, "WORLD_SIZE"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT='70000'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RESTART_COUNT", "-1"}},
       "TORCHELASTIC_RESTART_COUNT='-1'"},
      {{{"RANK", "0"},
        {"WORLD_SIZE", "2"},
        {"TORCHELASTIC_RUN_ID", "x"},
        {"TORCHELASTIC_USE_AGENT_STORE", "yes"}},
       "TORCHELASTIC_USE_AGENT_STORE='yes'"},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID='3'"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_JOB_NODELIST", "a"},
        {"SLURM_JOB_ID", "j1"}},
       "SLURM_JOB_ID='j1'"}};
  for (const auto& [values, named] : cases) {
    Environment env(values);
    INFO(named);
    CHECK_THROWS_WITH(Rendezvous::from_env(), Contains(named));
  }
}

}  // namespace rendezvous_test
