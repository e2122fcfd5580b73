#include "unpack_tar.h"

#include <mlo/base/error.h>

#include <archive.h>
#include <archive_entry.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <memory>

namespace mlo {
namespace data {
namespace detail {
namespace {

namespace fs = std::filesystem;

struct ArchiveCloser {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using ArchiveReader = std::unique_ptr<struct archive, ArchiveCloser>;

std::string archive_error(struct archive* a) {
  const char* text = archive_error_string(a);
  return text != nullptr ? text : "unknown libarchive error";
}

// The member's path relative to the target folder; refuses any that would leave it.
fs::path member_path(const std::string& archive, const std::string& name) {
  const fs::path path = fs::path(name).lexically_normal();
  MLO_CHECK(!path.is_absolute(), "unpacking '", archive, "': member '", name,
            "' has an absolute path; refused (members must stay inside the dataset's folder)");
  for (const auto& part : path) {
    MLO_CHECK(part != "..", "unpacking '", archive, "': member '", name,
              "' leads out of the folder through '..'; refused");
  }
  return path;
}

void write_member(struct archive* a, const std::string& archive, const std::string& name,
                  const fs::path& file) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  MLO_CHECK(out.good(), "unpacking '", archive, "': cannot write '", file.string(), "'");
  std::array<char, 1 << 16> buffer{};
  for (;;) {
    const la_ssize_t n = archive_read_data(a, buffer.data(), buffer.size());
    MLO_CHECK(n >= 0, "unpacking '", archive, "': member '", name,
              "' is damaged or cut short: ", archive_error(a));
    if (n == 0) break;
    out.write(buffer.data(), n);
  }
  out.close();
  MLO_CHECK(!out.fail(), "unpacking '", archive, "': writing '", file.string(),
            "' failed (disk full?)");
}

}  // namespace

void unpack_tar(const std::string& archive, const std::string& into) {
  ArchiveReader reader(archive_read_new());
  MLO_CHECK(reader != nullptr, "unpacking '", archive, "': libarchive could not start");
  struct archive* a = reader.get();
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  MLO_CHECK(archive_read_open_filename(a, archive.c_str(), 1 << 16) == ARCHIVE_OK, "unpacking '",
            archive, "': not a tar archive, or a damaged one: ", archive_error(a));
  struct archive_entry* entry = nullptr;
  int status = ARCHIVE_OK;
  // ARCHIVE_WARN: a header read with a remark (a name not representable in the locale, say);
  // the member itself is whole.
  while ((status = archive_read_next_header(a, &entry)) == ARCHIVE_OK || status == ARCHIVE_WARN) {
    const char* raw = archive_entry_pathname(entry);
    const std::string name = raw != nullptr ? raw : "";
    const fs::path relative = member_path(archive, name);
    const auto type = archive_entry_filetype(entry);
    if (type == AE_IFDIR) {
      fs::create_directories(fs::path(into) / relative);
    } else if (type == AE_IFREG) {
      MLO_CHECK(!relative.empty() && relative != ".", "unpacking '", archive,
                "': a file member has no name");
      write_member(a, archive, name, fs::path(into) / relative);
    } else {
      MLO_CHECK(false, "unpacking '", archive, "': member '", name,
                "' is a link, a device or a pipe; only files and folders are unpacked");
    }
  }
  MLO_CHECK(status == ARCHIVE_EOF, "unpacking '", archive,
            "': not a tar archive, or a damaged one: ", archive_error(a));
}

}  // namespace detail
}  // namespace data
}  // namespace mlo
