#include <mlo/dist/rendezvous.h>

#include <mlo/base/error.h>
#include <mlo/detail/torch_compat.h>

#include <cerrno>
#include <cstdlib>

namespace mlo {
namespace dist {
namespace {

const char* env(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

long parse_long(const char* name, const char* text, long low, long high) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  MLO_CHECK(errno == 0 && end != text && *end == '\0' && value >= low && value <= high,
            "environment variable ", name, "='", text, "': expected an integer in [", low, ", ",
            high, "]");
  return value;
}

// An integer environment variable, or `fallback` when it is unset.
int env_int(const char* name, int fallback, int low, int high) {
  const char* text = env(name);
  return text == nullptr ? fallback : static_cast<int>(parse_long(name, text, low, high));
}

constexpr int kMaxWorld = 1 << 20;

// A number of a bracket range ("007"), and its width when zero-padded.
long range_number(const std::string& text, const std::string& variable, const std::string& list) {
  MLO_CHECK(!text.empty() && text.size() <= 9 &&
                text.find_first_not_of("0123456789") == std::string::npos,
            variable, "='", list, "': '", text, "' in a bracket is not a number");
  return std::stol(text);
}

void expand_into(const std::string& name, const std::string& variable, const std::string& list,
                 std::vector<std::string>& out) {
  const size_t open = name.find('[');
  if (open == std::string::npos) {
    MLO_CHECK(name.find(']') == std::string::npos, variable, "='", list, "': '", name,
              "' has a ']' without its '['");
    out.push_back(name);
    return;
  }
  const size_t close = name.find(']', open);
  MLO_CHECK(close != std::string::npos, variable, "='", list, "': '", name,
            "' has a '[' without its ']'");
  const std::string prefix = name.substr(0, open);
  const std::string body = name.substr(open + 1, close - open - 1);
  const std::string rest = name.substr(close + 1);
  MLO_CHECK(prefix.find(']') == std::string::npos && body.find('[') == std::string::npos, variable,
            "='", list, "': '", name, "' has unbalanced brackets");
  MLO_CHECK(!body.empty(), variable, "='", list, "': '", name, "' has an empty bracket");
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string range = body.substr(start, comma - start);
    const size_t dash = range.find('-');
    const std::string low_text = range.substr(0, dash);
    const std::string high_text = dash == std::string::npos ? low_text : range.substr(dash + 1);
    const long low = range_number(low_text, variable, list);
    const long high = range_number(high_text, variable, list);
    MLO_CHECK(low <= high, variable, "='", list, "': the range '", range, "' runs backwards");
    MLO_CHECK(high - low < kMaxWorld && out.size() + static_cast<size_t>(high - low) < kMaxWorld,
              variable, "='", list, "': more than ", kMaxWorld, " hosts");
    for (long n = low; n <= high; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low_text.size()) {
        digits.insert(0, low_text.size() - digits.size(), '0');
      }
      expand_into(prefix + digits + rest, variable, list, out);
    }
    start = comma + 1;
  }
}

}  // namespace

std::vector<std::string> expand_host_list(const std::string& list, const std::string& variable) {
  std::vector<std::string> out;
  int depth = 0;
  std::string item;
  auto finish = [&] {
    MLO_CHECK(!item.empty(), variable, "='", list, "': an empty host name");
    expand_into(item, variable, list, out);
    item.clear();
  };
  for (const char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    MLO_CHECK(depth == 0 || depth == 1, variable, "='", list, "': unbalanced brackets");
    if (c == ',' && depth == 0) {
      finish();
    } else {
      item += c;
    }
  }
  MLO_CHECK(depth == 0, variable, "='", list, "': a '[' without its ']'");
  finish();
  return out;
}

Rendezvous Rendezvous::from_env() {
  Rendezvous r;
  if (env("RANK") != nullptr || env("WORLD_SIZE") != nullptr) {
    MLO_CHECK(env("RANK") != nullptr && env("WORLD_SIZE") != nullptr, "environment variable ",
              env("RANK") ? "RANK" : "WORLD_SIZE", " is set but ",
              env("RANK") ? "WORLD_SIZE" : "RANK", " is not (a launcher sets both)");
    r.world_size = env_int("WORLD_SIZE", 1, 1, kMaxWorld);
    r.rank = env_int("RANK", 0, 0, r.world_size - 1);
    r.local_rank = env_int("LOCAL_RANK", r.rank, 0, r.world_size - 1);
    r.node_rank = env_int("GROUP_RANK", 0, 0, r.world_size - 1);
    if (const char* addr = env("MASTER_ADDR")) r.master_addr = addr;
    r.master_port = env_int("MASTER_PORT", r.master_port, 1, 65535);
    if (env("TORCHELASTIC_RUN_ID") != nullptr || env("TORCHELASTIC_RESTART_COUNT") != nullptr) {
      r.launcher = "torchrun";
      r.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, 1 << 30);
      if (const char* agent = env("TORCHELASTIC_USE_AGENT_STORE")) {
        MLO_CHECK(std::string(agent) == "True" || std::string(agent) == "False",
                  "environment variable TORCHELASTIC_USE_AGENT_STORE='", agent,
                  "': expected True or False (as torchrun sets it)");
        r.agent_store = std::string(agent) == "True";
      }
    } else if (env("MLO_RESTART_COUNT") != nullptr) {
      r.launcher = "mlo launch";
      r.restart_count = env_int("MLO_RESTART_COUNT", 0, 0, 1 << 30);
    } else {
      r.launcher = "RANK/WORLD_SIZE";
    }
    return r;
  }
  if (env("SLURM_PROCID") != nullptr && env("SLURM_NTASKS") != nullptr) {
    r.launcher = "Slurm (srun)";
    r.from_scheduler = true;
    // (an srun step's own size and nodes when it has them: a step may use part of the job)
    r.world_size = env("SLURM_STEP_NUM_TASKS") != nullptr
                       ? env_int("SLURM_STEP_NUM_TASKS", 1, 1, kMaxWorld)
                       : env_int("SLURM_NTASKS", 1, 1, kMaxWorld);
    r.rank = env_int("SLURM_PROCID", 0, 0, r.world_size - 1);
    r.local_rank = env_int("SLURM_LOCALID", 0, 0, r.world_size - 1);
    r.node_rank = env_int("SLURM_NODEID", 0, 0, r.world_size - 1);
    if (const char* addr = env("MASTER_ADDR")) {
      r.master_addr = addr;
    } else if (r.world_size > 1) {
      const char* nodes = nullptr;
      const char* name = nullptr;
      for (const char* variable : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
        if (nodes == nullptr && (nodes = env(variable)) != nullptr) name = variable;
      }
      MLO_CHECK(nodes != nullptr, "Slurm task ", r.rank, " of ", r.world_size,
                ": neither MASTER_ADDR nor SLURM_JOB_NODELIST is set, so the host of rank 0's "
                "store is unknown (export MASTER_ADDR=<first node of the job>)");
      r.master_addr = expand_host_list(nodes, name).front();
    }
    if (env("MASTER_PORT") != nullptr) {
      r.master_port = env_int("MASTER_PORT", r.master_port, 1, 65535);
    } else if (r.world_size > 1) {
      const char* job = env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : env("SLURM_JOBID");
      MLO_CHECK(job != nullptr, "Slurm task ", r.rank, " of ", r.world_size,
                ": neither MASTER_PORT nor SLURM_JOB_ID is set, so the port of rank 0's store "
                "is unknown (export MASTER_PORT=<a free port>)");
      const long job_id =
          parse_long(env("SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID", job, 0, 1L << 40);
      const long step_id = env("SLURM_STEP_ID") != nullptr
                               ? parse_long("SLURM_STEP_ID", env("SLURM_STEP_ID"), 0, 1L << 40)
                               : 0;
      r.master_port = kSlurmPortBase + static_cast<int>((job_id + 1000 * step_id) % kSlurmPortSpan);
    }
    return r;
  }
  return r;
}

int Rendezvous::own_store_port() const {
  if (!agent_store) return master_port;
#if MLO_TORCH_AT_LEAST(2, 0)
  return -1;
#else
  if (env("MLO_STORE_PORT") == nullptr) {
    MLO_CHECK(master_port < 65535,
              "MASTER_PORT=65535 leaves no MASTER_PORT + 1 for mlo's own "
              "store (LibTorch 1.13 beside torchrun's agent store); set MLO_STORE_PORT");
  }
  return env_int("MLO_STORE_PORT", master_port + 1, 1, 65535);
#endif
}

}  // namespace dist
}  // namespace mlo
