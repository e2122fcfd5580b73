#pragma once
/// \file
/// Fetching a dataset's published files into a folder: HTTP(S) through libcurl with progress in
/// the log, each file checked against its published MD5, tar archives unpacked through
/// libarchive, and the folder put in place only once everything checked out (a temporary folder
/// beside it, then a rename), so a failed or interrupted download never leaves a half-written
/// dataset where a reader would take it for a whole one. A build configured with
/// `-DMLO_WITH_DOWNLOAD=OFF` has no downloads: both functions here throw `mlo::Error` saying so.
///
/// ```
/// mlo::data::DownloadSource source;
/// source.files = {{"https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
///                  "c32a1d4ab5d03f1284b67883e8d87530", /*unpack=*/true}};
/// source.folder = "cifar-10-batches-bin";
/// source.expected = {"data_batch_1.bin", "test_batch.bin"};
/// mlo::data::download(source, "data/cifar-10-batches-bin");
/// ```

#include <string>
#include <vector>

namespace mlo {
namespace data {

/// One published file of a dataset.
struct RemoteFile {
  /// Where it is fetched from (http://, https:// or file://).
  std::string url;
  /// Its published MD5, 32 hexadecimal digits (either case); the download fails on any other.
  std::string md5;
  /// A tar archive (gzip, bzip2 or xz compressed, or not) to unpack; false: the file is kept as
  /// it is, under the last segment of its URL.
  bool unpack = false;
};

/// Everything a dataset publishes, and what its folder must hold afterwards.
struct DownloadSource {
  /// The files to fetch, in order.
  std::vector<RemoteFile> files;
  /// The folder, inside what the files unpack to, that becomes the dataset's folder ("" = all
  /// of it). CIFAR-10's archive unpacks to `cifar-10-batches-bin/`, which is named here.
  std::string folder;
  /// Paths, relative to the dataset's folder, that must exist once unpacked; the download fails
  /// naming the first missing one.
  std::vector<std::string> expected;
};

/// How a download behaves.
struct DownloadOptions {
  /// Seconds under 1 byte/s (libcurl averages the speed over its last few seconds), or to
  /// connect, before the download fails as stalled.
  long stall_timeout_s = 60;
  /// Log the progress (bytes, percentage, rate) every `progress_interval_s` seconds.
  bool progress = true;
  /// Seconds between two progress lines.
  double progress_interval_s = 5.0;
};

/// Fetches `source` into the folder `root`, which must not exist yet or be empty.
///
/// The files go to a temporary folder beside `root` (`.<name>.download-XXXXXX` in its parent),
/// are checked against their MD5 and unpacked there; the expected paths are checked; then the
/// folder is renamed to `root` and the temporary folder removed. On any failure (HTTP error,
/// connection lost, a body shorter than announced, a checksum or a member that does not match,
/// an archive member outside the folder or other than a file or folder) it throws `mlo::Error`
/// naming the URL or the file and what was wrong, and removes everything it wrote: `root` is
/// left as it was. When another process put the dataset into `root` meanwhile (two ranks
/// downloading at once), that copy is kept and this one discarded.
void download(const DownloadSource& source, const std::string& root,
              const DownloadOptions& options = DownloadOptions());

/// The MD5 of the file at `path`, as 32 lowercase hexadecimal digits; throws `mlo::Error` when
/// it cannot be read.
std::string file_md5(const std::string& path);

}  // namespace data
}  // namespace mlo
