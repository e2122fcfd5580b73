#pragma once
// Unpacking a downloaded tar archive (data area, private): libarchive reads it, mlo writes the
// members, so that only regular files and folders inside the target folder are ever written.

#include <string>

namespace mlo {
namespace data {
namespace detail {

// Unpacks the tar archive `archive` (gzip, bzip2 or xz compressed, or not) into the existing
// folder `into`. Throws `mlo::Error` naming the archive and the member for a member with an
// absolute path or a `..` segment, a link, a device or any other non-file, and for a damaged or
// truncated archive; what was written before the error stays in `into` (the caller's temporary
// folder).
void unpack_tar(const std::string& archive, const std::string& into);

}  // namespace detail
}  // namespace data
}  // namespace mlo
