#include <mlo/data/download.h>

#include <mlo/base/build_info.h>
#include <mlo/base/error.h>
#include <mlo/build_config.h>

#if MLO_WITH_DOWNLOAD
#include "unpack_tar.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#endif

namespace mlo {
namespace data {

#if MLO_WITH_DOWNLOAD
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;

// NOTE: curl_global_init is not thread-safe before libcurl 7.84; a function-local static runs
// it once, on the first download.
void init_curl() {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  MLO_CHECK(init == CURLE_OK, "download: libcurl failed to start: ", curl_easy_strerror(init));
}

struct CurlCloser {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

// One transfer's destination and progress reporting.
struct Transfer {
  std::FILE* out = nullptr;
  std::string url;
  const DownloadOptions* options = nullptr;
  Clock::time_point start = Clock::now();
  Clock::time_point last_report = Clock::now();
};

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  return std::fwrite(data, size, count, transfer->out) * size;
}

int report_progress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* transfer = static_cast<Transfer*>(user);
  const auto t = Clock::now();
  if (!transfer->options->progress ||
      std::chrono::duration<double>(t - transfer->last_report).count() <
          transfer->options->progress_interval_s) {
    return 0;
  }
  transfer->last_report = t;
  const double seconds = std::chrono::duration<double>(t - transfer->start).count();
  const double rate = seconds > 0 ? static_cast<double>(now) / kMiB / seconds : 0.0;
  if (total > 0) {
    spdlog::info("download {}: {:.1f} of {:.1f} MiB ({:.0f}%), {:.1f} MiB/s", transfer->url,
                 static_cast<double>(now) / kMiB, static_cast<double>(total) / kMiB,
                 100.0 * static_cast<double>(now) / static_cast<double>(total), rate);
  } else {
    spdlog::info("download {}: {:.1f} MiB, {:.1f} MiB/s", transfer->url,
                 static_cast<double>(now) / kMiB, rate);
  }
  return 0;
}

// Fetches `url` into the file `to`; throws naming the URL and what went wrong.
void fetch(const std::string& url, const fs::path& to, const DownloadOptions& options) {
  init_curl();
  std::unique_ptr<std::FILE, FileCloser> out(std::fopen(to.c_str(), "wb"));
  MLO_CHECK(out != nullptr, "download: cannot write '", to.string(), "'");
  std::unique_ptr<CURL, CurlCloser> curl(curl_easy_init());
  MLO_CHECK(curl != nullptr, "download: libcurl could not start a transfer");
  Transfer transfer;
  transfer.out = out.get();
  transfer.url = url;
  transfer.options = &options;
  std::array<char, CURL_ERROR_SIZE> error{};
  const std::string agent = "mlo/" + build_info().version;
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, report_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error.data());
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);  // HTTP 4xx/5xx: an error, not a body
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_USERAGENT, agent.c_str());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, options.stall_timeout_s);
  // A transfer slower than 1 byte/s for stall_timeout_s seconds has stalled.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options.stall_timeout_s);
  const CURLcode code = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_off_t received = 0;
  curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &received);
  const bool closed = std::fclose(out.release()) == 0;
  if (code == CURLE_HTTP_RETURNED_ERROR) {
    MLO_CHECK(false, "download of '", url, "' failed: the server answered HTTP ", status);
  }
  if (code == CURLE_PARTIAL_FILE) {
    MLO_CHECK(false, "download of '", url, "' failed: the connection closed after ", received,
              " bytes, before the end the server announced (a truncated download)");
  }
  if (code == CURLE_OPERATION_TIMEDOUT) {
    MLO_CHECK(false, "download of '", url, "' failed: stalled, under 1 byte/s for ",
              options.stall_timeout_s, " s (libcurl's average), after ", received, " bytes");
  }
  MLO_CHECK(code == CURLE_OK, "download of '", url,
            "' failed: ", error[0] != '\0' ? error.data() : curl_easy_strerror(code));
  MLO_CHECK(closed, "download: writing '", to.string(), "' failed (disk full?)");
  spdlog::info("download {}: {:.1f} MiB received", url, static_cast<double>(received) / kMiB);
}

// The last segment of the URL's path ("cifar-10-binary.tar.gz"), without query or fragment.
std::string file_name(const std::string& url) {
  std::string path = url.substr(0, url.find_first_of("?#"));
  const auto slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  MLO_CHECK(!name.empty() && name != "." && name != "..", "download: '", url,
            "' names no file (its path must end in a file name)");
  return name;
}

bool is_md5(const std::string& text) {
  if (text.size() != 32) return false;
  for (const char ch : text) {
    if (std::isxdigit(static_cast<unsigned char>(ch)) == 0) return false;
  }
  return true;
}

std::string lowercase(std::string text) {
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

// A temporary folder, removed with its content when the download ends either way.
struct Scratch {
  explicit Scratch(const fs::path& parent, const std::string& name) {
    std::string pattern = (parent / ("." + name + ".download-XXXXXX")).string();
    MLO_CHECK(::mkdtemp(pattern.data()) != nullptr, "download: cannot create a folder in '",
              parent.string(), "': ", std::strerror(errno));
    path = pattern;
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  fs::path path;
};

bool holds_expected(const fs::path& folder, const DownloadSource& source) {
  for (const auto& path : source.expected) {
    if (!fs::exists(folder / path)) return false;
  }
  return true;
}

}  // namespace

std::string file_md5(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MLO_CHECK(in.good(), "MD5: cannot read '", path, "'");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  MLO_CHECK(context != nullptr && EVP_DigestInit_ex(context.get(), EVP_md5(), nullptr) == 1,
            "MD5: OpenSSL could not start a digest");
  std::array<char, 1 << 16> buffer{};
  while (in) {
    in.read(buffer.data(), buffer.size());
    if (in.gcount() > 0) {
      EVP_DigestUpdate(context.get(), buffer.data(), static_cast<size_t>(in.gcount()));
    }
  }
  MLO_CHECK(in.eof(), "MD5: reading '", path, "' failed");
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  EVP_DigestFinal_ex(context.get(), digest.data(), &size);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

namespace {

// The download proper; `download` turns the filesystem's exceptions into mlo::Error.
void fetch_into(const DownloadSource& source, const std::string& root,
                const DownloadOptions& options) {
  MLO_CHECK(!source.files.empty(), "download: no files to fetch into '", root, "'");
  MLO_CHECK(!root.empty(), "download: no folder to fetch into");
  MLO_CHECK(options.stall_timeout_s > 0, "download: stall_timeout_s must be > 0, got ",
            options.stall_timeout_s);
  for (const auto& file : source.files) {
    MLO_CHECK(is_md5(file.md5), "download: the MD5 of '", file.url,
              "' must be 32 hexadecimal digits, got '", file.md5, "'");
  }
  fs::path target = fs::absolute(root).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "data/cifar/"
  std::error_code ec;
  if (fs::exists(target) && !(fs::is_directory(target) && fs::is_empty(target))) {
    if (fs::is_directory(target) && holds_expected(target, source) && !source.expected.empty()) {
      spdlog::info("download: '{}' was filled by another process meanwhile; keeping that copy",
                   root);
      return;
    }
    MLO_CHECK(false, "download: '", root,
              "' exists and is not an empty folder: a download creates the dataset's folder "
              "itself, so name one that does not exist yet (e.g. the dataset's default), or "
              "empty this one");
  }
  fs::create_directories(target.parent_path());
  Scratch scratch(target.parent_path(), target.filename().string());
  const fs::path content = scratch.path / "content";
  fs::create_directories(content);

  for (const auto& file : source.files) {
    const std::string name = file_name(file.url);
    const fs::path fetched = scratch.path / ("fetched-" + name);
    spdlog::info("downloading {} into {}", file.url, root);
    fetch(file.url, fetched, options);
    const std::string md5 = file_md5(fetched.string());
    MLO_CHECK(md5 == lowercase(file.md5), "download of '", file.url, "': its MD5 is ", md5,
              ", not the published ", lowercase(file.md5),
              " (a damaged or different file); nothing was kept");
    if (file.unpack) {
      detail::unpack_tar(fetched.string(), content.string());
      fs::remove(fetched);
    } else {
      fs::rename(fetched, content / name);
    }
  }

  const fs::path folder = source.folder.empty() ? content : content / source.folder;
  MLO_CHECK(fs::is_directory(folder), "download into '", root, "': the files hold no folder '",
            source.folder, "'; nothing was kept");
  for (const auto& path : source.expected) {
    MLO_CHECK(fs::exists(folder / path), "download into '", root, "': '", path,
              "' is missing from what was fetched; nothing was kept");
  }
  // NOTE: rename(2) replaces an empty folder and fails on a full one, so a copy that another
  // process put in place meanwhile is never overwritten.
  fs::rename(folder, target, ec);
  if (ec) {
    MLO_CHECK(fs::is_directory(target) && holds_expected(target, source), "download: moving '",
              folder.string(), "' to '", target.string(), "' failed: ", ec.message());
    spdlog::info("download: '{}' was filled by another process meanwhile; keeping that copy", root);
    return;
  }
  spdlog::info("download: the dataset is in '{}'", root);
}

}  // namespace

void download(const DownloadSource& source, const std::string& root,
              const DownloadOptions& options) {
  try {
    fetch_into(source, root, options);
  } catch (const fs::filesystem_error& error) {
    // NOTE: a permission denied, a file where a folder must go, a full disk: mlo::Error, so that
    // the command line reports it as the user's to fix, naming the folder.
    throw Error("download into '" + root + "' failed: " + error.what());
  }
}

#else  // MLO_WITH_DOWNLOAD

// NOTE: a build without libcurl, OpenSSL and libarchive (-DMLO_WITH_DOWNLOAD=OFF) refuses, so
// that a config asking for a download fails saying why instead of failing to link.
void download(const DownloadSource& source, const std::string& root, const DownloadOptions&) {
  MLO_CHECK(false, "download into '", root, "' of ",
            source.files.empty() ? std::string("nothing") : source.files.front().url,
            ": this build of mlo has no downloads (configured with -DMLO_WITH_DOWNLOAD=OFF); ",
            "put the files there by hand, or rebuild with it on");
}

std::string file_md5(const std::string& path) {
  MLO_CHECK(false, "MD5 of '", path, "': this build of mlo has no downloads ",
            "(configured with -DMLO_WITH_DOWNLOAD=OFF)");
  return {};
}

#endif  // MLO_WITH_DOWNLOAD

}  // namespace data
}  // namespace mlo
