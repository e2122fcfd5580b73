#include "log_file.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace mlo {
namespace io {

LogFile::LogFile(const std::string& path, bool main, int rank, bool quiet_console,
                 bool all_ranks)
    : previous_(spdlog::default_logger()) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  std::shared_ptr<spdlog::logger> logger;
  if (main) {
    console->set_level(quiet_console ? spdlog::level::warn : spdlog::level::info);
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    file->set_level(spdlog::level::info);
    logger = std::make_shared<spdlog::logger>("mlo", spdlog::sinks_init_list{console, file});
    logger->set_pattern("[%Y-%m-%d %H:%M:%S] [%^%l%$] %v");
  } else {
    console->set_level(all_ranks ? spdlog::level::info : spdlog::level::warn);
    logger = std::make_shared<spdlog::logger>("mlo-rank" + std::to_string(rank), console);
  }
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

LogFile::~LogFile() { spdlog::set_default_logger(previous_); }

}  // namespace io
}  // namespace mlo
