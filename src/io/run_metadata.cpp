#include "run_metadata.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <array>
#include <ctime>
#include <sstream>

namespace mlo {
namespace io {
namespace {

// An argument as a POSIX shell reads it back: plain when it is made of safe characters, else
// in single quotes (a single quote inside becomes '\'').
std::string shell_quoted(const std::string& argument) {
  const bool safe = !argument.empty() &&
                    argument.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                               "0123456789_-./=:,+@%") == std::string::npos;
  if (safe) return argument;
  std::string quoted = "'";
  for (const char c : argument) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A Markdown table cell: pipes escaped, line breaks as spaces and backticks as quotes, so that
// a value cannot break the table or the code span around the command.
std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else {
      out += c == '\n' || c == '\r' ? ' ' : c == '`' ? '\'' : c;
    }
  }
  return out;
}

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text.data();
}

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "unknown";
  return name.data();
}

nlohmann::json to_json(const RunMetadata& meta) {
  nlohmann::json out;
  out["mlo_version"] = meta.build.version;
  out["git_commit"] = meta.build.git_commit;
  out["libtorch"] = meta.build.torch_version;
  out["cuda_build"] = meta.build.cuda;
  out["hostname"] = meta.hostname;
  out["device"] = meta.device;
  out["threads"] = meta.threads;
  out["world_size"] = meta.world_size;
  out["seed"] = meta.seed ? nlohmann::json(*meta.seed) : nlohmann::json(nullptr);
  out["start_step"] = meta.start_step;
  out["started"] = meta.started;
  out["finished"] = meta.finished;
  out["command"] = meta.command;
  return out;
}

std::string to_markdown(const RunMetadata& meta) {
  std::string command;
  for (const auto& argument : meta.command) {
    command += (command.empty() ? "" : " ") + shell_quoted(argument);
  }
  std::ostringstream out;
  out << "| | |\n|---|---|\n"
      << "| mlo | " << cell(meta.build.version) << " (" << cell(meta.build.git_commit) << ") |\n"
      << "| LibTorch | " << cell(meta.build.torch_version)
      << (meta.build.cuda ? ", with CUDA" : ", CPU only") << " |\n"
      << "| host | " << cell(meta.hostname) << " |\n"
      << "| device | " << cell(meta.device) << " |\n"
      << "| threads | " << meta.threads << " |\n"
      << "| world size | " << meta.world_size << " |\n"
      << "| seed | " << (meta.seed ? std::to_string(*meta.seed) : std::string("-")) << " |\n"
      << "| from step | " << meta.start_step << " |\n"
      << "| started | " << cell(meta.started) << " |\n";
  if (!meta.finished.empty()) out << "| finished | " << cell(meta.finished) << " |\n";
  out << "| command | `" << cell(command) << "` |\n";
  return out.str();
}

}  // namespace io
}  // namespace mlo
