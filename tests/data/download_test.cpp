// Dataset downloads against a server on 127.0.0.1 that this test starts: a CIFAR-10-format
// archive built here (the real layout and record format) is fetched, checked, unpacked and read
// back exactly; a truncated transfer, a wrong checksum, an HTTP error, a member that leaves the
// folder, a link and a missing member each fail with a clear error and leave nothing behind.
#include <mlo/base/error.h>
#include <mlo/data/cifar10.h>
#include <mlo/data/download.h>
#include <mlo/data/registry.h>
#include "support/http_server.h"
#include "support/scratch.h"

#include <archive.h>
#include <archive_entry.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace download_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using mlo_test::HttpRoute;
using mlo_test::HttpServer;
using mlo_test::TempDir;

namespace {

struct Member {
  std::string name;
  std::string data;
  unsigned type = AE_IFREG;  // AE_IFLNK: `data` is the link's target
};

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& file, const std::string& data) {
  std::ofstream(file, std::ios::binary) << data;
}

// A gzip-compressed tar archive of `members`, written by libarchive (pax format) into `file`.
std::string tar_gz(const std::vector<Member>& members, const fs::path& file) {
  struct archive* a = archive_write_new();
  archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  REQUIRE(archive_write_open_filename(a, file.c_str()) == ARCHIVE_OK);
  for (const auto& member : members) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, member.name.c_str());
    archive_entry_set_filetype(entry, member.type);
    archive_entry_set_perm(entry, 0644);
    if (member.type == AE_IFLNK) {
      archive_entry_set_symlink(entry, member.data.c_str());
      archive_entry_set_size(entry, 0);
    } else {
      archive_entry_set_size(entry, static_cast<la_int64_t>(member.data.size()));
    }
    REQUIRE(archive_write_header(a, entry) == ARCHIVE_OK);
    if (member.type == AE_IFREG) {
      archive_write_data(a, member.data.data(), member.data.size());
    }
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return read_file(file);
}

// CIFAR-10 binary records: per record a label byte, then 3072 pixels p = (r * 7 + b) % 256 for
// the global record number r.
std::string cifar_batch(const std::vector<uint8_t>& labels, int first_record) {
  std::string bytes;
  for (size_t r = 0; r < labels.size(); ++r) {
    bytes += static_cast<char>(labels[r]);
    for (int b = 0; b < 3072; ++b) {
      bytes += static_cast<char>((static_cast<int>(first_record + r) * 7 + b) % 256);
    }
  }
  return bytes;
}

// The official archive's layout: cifar-10-batches-bin/ with five training batches (2 records
// each here), the test batch and the label names.
std::vector<Member> cifar_members() {
  std::vector<Member> members;
  members.push_back({"cifar-10-batches-bin/", "", AE_IFDIR});
  for (int i = 1; i <= 5; ++i) {
    members.push_back({"cifar-10-batches-bin/data_batch_" + std::to_string(i) + ".bin",
                       cifar_batch({static_cast<uint8_t>(i), 9}, (i - 1) * 2)});
  }
  members.push_back({"cifar-10-batches-bin/test_batch.bin", cifar_batch({3}, 100)});
  members.push_back({"cifar-10-batches-bin/batches.meta.txt", "airplane\nautomobile\n"});
  return members;
}

// The entries of `folder` (names), sorted.
std::vector<std::string> entries(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The CIFAR-10 entry with its archive served by `server` at `path` with checksum `md5`,
// registered under a name of its own: `prefix` and a number (a name is registered once).
std::string register_local_cifar(const HttpServer& server, const std::string& path,
                                 const std::string& md5, const std::string& prefix) {
  static int registered = 0;
  const std::string name = prefix + "_" + std::to_string(++registered);
  mlo::data::DatasetEntry entry = mlo::data::dataset_entry("cifar10");
  entry.source.files = {{server.url(path), md5, /*unpack=*/true}};
  mlo::data::register_dataset(name, entry);
  return name;
}

mlo::data::DownloadOptions quiet() {
  mlo::data::DownloadOptions options;
  options.progress = false;
  options.stall_timeout_s = 10;
  return options;
}

}  // namespace

TEST_CASE("download: MD5 of the RFC 1321 vectors and agreement with md5sum", "[data][download]") {
  TempDir tmp("download_md5");
  const std::pair<std::string, std::string> vectors[] = {
      {"", "d41d8cd98f00b204e9800998ecf8427e"},
      {"abc", "900150983cd24fb0d6963f7d28e17f72"},
      {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
      {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
       "57edf4a22be3c955ac49da2e2107b67a"}};
  for (const auto& vector : vectors) {
    write_file(tmp.path / "v", vector.first);
    INFO("input '" << vector.first << "'");
    CHECK(mlo::data::file_md5((tmp.path / "v").string()) == vector.second);
  }
  // 1 MiB + 3 bytes of varied data (more than one read buffer) against coreutils' md5sum.
  std::string big;
  for (int i = 0; i < (1 << 20) + 3; ++i) big += static_cast<char>((i * 131 + i / 7) % 256);
  write_file(tmp.path / "big", big);
  std::FILE* pipe = ::popen(("md5sum '" + (tmp.path / "big").string() + "'").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[33] = {};
  REQUIRE(std::fread(line, 1, 32, pipe) == 32);
  ::pclose(pipe);
  CHECK(mlo::data::file_md5((tmp.path / "big").string()) == std::string(line, 32));
  CHECK_THROWS_WITH(mlo::data::file_md5((tmp.path / "absent").string()),
                    Contains("cannot read") && Contains("absent"));
}

TEST_CASE("download: a CIFAR-10-format archive is fetched, checked, unpacked and read back",
          "[data][download]") {
  TempDir tmp("download_cifar");
  HttpServer server;
  const std::string archive = tar_gz(cifar_members(), tmp.path / "cifar.tar.gz");
  server.add("/cifar-10-binary.tar.gz", {archive});
  const std::string name = register_local_cifar(
      server, "/cifar-10-binary.tar.gz", mlo::data::file_md5((tmp.path / "cifar.tar.gz").string()),
      "cifar10_download_test");
  const fs::path data = tmp.path / "data";
  const std::string root = (data / "cifar-10-batches-bin").string();

  REQUIRE(mlo::data::prepare_dataset(name, root, /*download=*/true, quiet()) == root);
  CHECK(server.requests() == 1);
  // Only the dataset's folder is left: no archive, no temporary folder.
  CHECK(entries(data) == std::vector<std::string>{"cifar-10-batches-bin"});
  CHECK(entries(root) == std::vector<std::string>{"batches.meta.txt", "data_batch_1.bin",
                                                  "data_batch_2.bin", "data_batch_3.bin",
                                                  "data_batch_4.bin", "data_batch_5.bin",
                                                  "test_batch.bin"});
  // The reader takes the unpacked files as they are: every pixel and label exact.
  const mlo::data::ImageDataset loaded = mlo::data::load_dataset(name, [&] {
    mlo::data::DatasetRequest request;
    request.root = root;
    return request;
  }());
  REQUIRE(loaded.train_images.sizes() == torch::IntArrayRef({10, 3, 32, 32}));
  REQUIRE(loaded.test_images.sizes() == torch::IntArrayRef({1, 3, 32, 32}));
  const auto labels = loaded.train_targets;
  for (int64_t r = 0; r < 10; ++r) {
    INFO("record " << r);
    CHECK(labels[r].item<int64_t>() == (r % 2 == 0 ? r / 2 + 1 : 9));
    const auto flat = loaded.train_images[r].flatten();
    for (int64_t b : {0, 1023, 1024, 3071}) {
      CHECK(flat[b].item<int64_t>() == (r * 7 + b) % 256);
    }
  }
  CHECK(loaded.test_targets[0].item<int64_t>() == 3);
  CHECK(loaded.test_images[0].flatten()[5].item<int64_t>() == (100 * 7 + 5) % 256);

  // Present now: a second call neither downloads nor changes anything.
  REQUIRE(mlo::data::prepare_dataset(name, root, /*download=*/true, quiet()) == root);
  CHECK(server.requests() == 1);
}

TEST_CASE("download: failures say what was wrong and leave nothing behind", "[data][download]") {
  TempDir tmp("download_fail");
  HttpServer server;
  const std::string archive = tar_gz(cifar_members(), tmp.path / "good.tar.gz");
  const std::string md5 = mlo::data::file_md5((tmp.path / "good.tar.gz").string());
  const fs::path data = tmp.path / "data";
  fs::create_directories(data);
  const std::string root = (data / "cifar").string();
  auto fails = [&](const std::string& path, const std::string& checksum,
                   const mlo::data::DownloadOptions& options = quiet()) {
    const std::string name = register_local_cifar(server, path, checksum, "cifar10_fail_test");
    try {
      mlo::data::prepare_dataset(name, root, /*download=*/true, options);
    } catch (const mlo::Error& error) {
      // Nothing is left where the dataset would go, nor beside it.
      CHECK_FALSE(fs::exists(root));
      CHECK(entries(data).empty());
      return std::string(error.what());
    }
    FAIL("the download of " << path << " did not fail");
    return std::string();
  };

  SECTION("a transfer cut short: the server announces the whole archive and sends half") {
    server.add("/cut.tar.gz", {archive, 200, static_cast<long>(archive.size() / 2)});
    const std::string what = fails("/cut.tar.gz", md5);
    CHECK_THAT(what, Contains(server.url("/cut.tar.gz")) && Contains("truncated") &&
                         Contains(std::to_string(archive.size() / 2) + " bytes"));
  }
  SECTION("a stalled transfer: the headers, then silence past the stall timeout") {
    // NOTE: no body bytes before the silence: libcurl averages the speed over a few seconds,
    // so a burst first would hide a 1 s stall.
    server.add("/slow.tar.gz", {archive, 200, 0, 5000});
    mlo::data::DownloadOptions options = quiet();
    options.stall_timeout_s = 1;
    const std::string what = fails("/slow.tar.gz", md5, options);
    CHECK_THAT(what, Contains(server.url("/slow.tar.gz")) && Contains("stalled") &&
                         Contains("under 1 byte/s for 1 s"));
  }
  SECTION("a checksum that is not the published one") {
    server.add("/good.tar.gz", {archive});
    const std::string wrong = "0123456789abcdef0123456789abcdef";
    const std::string what = fails("/good.tar.gz", wrong);
    CHECK_THAT(what, Contains("MD5 is " + md5) && Contains("not the published " + wrong) &&
                         Contains("nothing was kept"));
  }
  SECTION("an HTTP error") {
    const std::string what = fails("/absent.tar.gz", md5);
    CHECK_THAT(what, Contains(server.url("/absent.tar.gz")) && Contains("HTTP 404"));
  }
  SECTION("an archive without the dataset's files") {
    auto members = cifar_members();
    members.erase(members.begin() + 3);  // data_batch_3.bin
    const std::string partial = tar_gz(members, tmp.path / "partial.tar.gz");
    server.add("/partial.tar.gz", {partial});
    const std::string what =
        fails("/partial.tar.gz", mlo::data::file_md5((tmp.path / "partial.tar.gz").string()));
    CHECK_THAT(what, Contains("'data_batch_3.bin' is missing"));
  }
  SECTION("a member that leads out of the folder") {
    auto members = cifar_members();
    members.push_back({"cifar-10-batches-bin/../../escaped.bin", "x"});
    const std::string evil = tar_gz(members, tmp.path / "evil.tar.gz");
    server.add("/evil.tar.gz", {evil});
    const std::string what =
        fails("/evil.tar.gz", mlo::data::file_md5((tmp.path / "evil.tar.gz").string()));
    CHECK_THAT(what, Contains("escaped.bin") && Contains("'..'"));
    CHECK_FALSE(fs::exists(tmp.path / "escaped.bin"));
  }
  SECTION("a link member") {
    auto members = cifar_members();
    members.push_back({"cifar-10-batches-bin/passwd", "/etc/passwd", AE_IFLNK});
    const std::string linked = tar_gz(members, tmp.path / "link.tar.gz");
    server.add("/link.tar.gz", {linked});
    const std::string what =
        fails("/link.tar.gz", mlo::data::file_md5((tmp.path / "link.tar.gz").string()));
    CHECK_THAT(what, Contains("passwd") && Contains("only files and folders"));
  }
  SECTION("not an archive") {
    server.add("/page.tar.gz", {"<html>moved</html>"});
    write_file(tmp.path / "page", "<html>moved</html>");
    const std::string what =
        fails("/page.tar.gz", mlo::data::file_md5((tmp.path / "page").string()));
    CHECK_THAT(what, Contains("not a tar archive"));
  }
}

TEST_CASE("download: a copy another process put in place meanwhile is kept", "[data][download]") {
  TempDir tmp("download_race");
  HttpServer server;
  const std::string archive = tar_gz(cifar_members(), tmp.path / "cifar.tar.gz");
  const fs::path data = tmp.path / "data";
  const fs::path root = data / "cifar";
  // While this download runs, "another process" finishes its own into the same folder.
  auto other_copy = [&] {
    fs::create_directories(root);
    for (const auto& file : mlo::data::dataset_entry("cifar10").source.expected) {
      write_file(root / file, "the other copy");
    }
  };
  server.add("/cifar.tar.gz", {archive, 200, -1, 0, other_copy});
  const std::string name = register_local_cifar(
      server, "/cifar.tar.gz", mlo::data::file_md5((tmp.path / "cifar.tar.gz").string()),
      "cifar10_race_test");
  CHECK(mlo::data::prepare_dataset(name, root.string(), /*download=*/true, quiet()) ==
        root.string());
  // The other copy stands untouched, and this download's temporary folder is gone.
  CHECK(read_file(root / "data_batch_1.bin") == "the other copy");
  CHECK_FALSE(fs::exists(root / "batches.meta.txt"));
  CHECK(entries(data) == std::vector<std::string>{"cifar"});
}

TEST_CASE("download: missing files without download name the key; a full folder is refused",
          "[data][download]") {
  TempDir tmp("download_refuse");
  HttpServer server;
  const std::string name =
      register_local_cifar(server, "/c.tar.gz", std::string(32, '0'), "cifar10_refuse_test");
  const std::string root = (tmp.path / "cifar").string();
  CHECK_THROWS_WITH(mlo::data::prepare_dataset(name, root, /*download=*/false),
                    Contains("not in '" + root + "'") && Contains("data_batch_1.bin") &&
                        Contains("data.download: true") && Contains("--set data.download=true") &&
                        Contains("cifar-10-binary"));
  CHECK(server.requests() == 0);
  CHECK_FALSE(fs::exists(root));

  fs::create_directories(root);
  write_file(fs::path(root) / "notes.txt", "mine");
  CHECK_THROWS_WITH(mlo::data::prepare_dataset(name, root, /*download=*/true, quiet()),
                    Contains("exists and is not an empty folder") &&
                        Contains("name one that does not exist yet"));
  CHECK(server.requests() == 0);
  CHECK(entries(root) == std::vector<std::string>{"notes.txt"});

  // A file where the download's parent folder must go: an mlo::Error naming the root, not the
  // filesystem's exception.
  write_file(tmp.path / "a_file", "");
  const std::string blocked = (tmp.path / "a_file" / "cifar").string();
  CHECK_THROWS_AS(mlo::data::prepare_dataset(name, blocked, /*download=*/true, quiet()),
                  mlo::Error);
  CHECK_THROWS_WITH(mlo::data::prepare_dataset(name, blocked, /*download=*/true, quiet()),
                    Contains("download into '" + blocked + "' failed"));

  mlo::data::DownloadSource bad;
  bad.files = {{server.url("/x"), "not-a-checksum", false}};
  CHECK_THROWS_WITH(mlo::data::download(bad, (tmp.path / "y").string(), quiet()),
                    Contains("32 hexadecimal digits") && Contains("not-a-checksum"));
}

TEST_CASE("download: plain files land under their names; an empty root uses the download folder",
          "[data][download]") {
  TempDir tmp("download_plain");
  HttpServer server;
  server.add("/files/a.gz", {"first file"});
  server.add("/files/b.gz?raw=1", {"second"});
  write_file(tmp.path / "a", "first file");
  write_file(tmp.path / "b", "second");

  // A dataset whose default folder (like Debian's Fashion-MNIST) lacks the files: the download
  // goes to its download folder, which an empty root then resolves to.
  mlo::data::DatasetEntry entry = mlo::data::dataset_entry("fashion_mnist");
  entry.default_root = (tmp.path / "system").string();
  entry.download_root = (tmp.path / "data" / "plain").string();
  entry.present = [](const std::string& root) { return fs::exists(root + "/a.gz"); };
  entry.source.files = {
      {server.url("/files/a.gz"), mlo::data::file_md5((tmp.path / "a").string())},
      {server.url("/files/b.gz?raw=1"), mlo::data::file_md5((tmp.path / "b").string())}};
  entry.source.expected = {"a.gz", "b.gz"};
  mlo::data::register_dataset("plain_download_test", entry);

  CHECK(mlo::data::dataset_root("plain_download_test", "") == entry.default_root);
  CHECK_THROWS_WITH(mlo::data::prepare_dataset("plain_download_test", "", false),
                    Contains(entry.default_root) && Contains(entry.download_root) &&
                        Contains("apt-get install dataset-fashion-mnist"));
  CHECK(mlo::data::prepare_dataset("plain_download_test", "", true, quiet()) ==
        entry.download_root);
  CHECK(read_file(entry.download_root + "/a.gz") == "first file");
  CHECK(read_file(entry.download_root + "/b.gz") == "second");
  CHECK(entries(tmp.path / "data") == std::vector<std::string>{"plain"});
  CHECK(mlo::data::dataset_root("plain_download_test", "") == entry.download_root);
  CHECK(mlo::data::prepare_dataset("plain_download_test", "", false) == entry.download_root);
  CHECK(server.requests() == 2);
}

}  // namespace download_test
