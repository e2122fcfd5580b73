#pragma once
// Private to src/io: checking the CRC-32 of every record of a zip file, as LibTorch writes its
// archives (records stored uncompressed, zip64 directory). LibTorch's reader does not check
// them, so a state file with flipped bytes inside a tensor would load without an error.

#include <string>

namespace mlo {
namespace io {
namespace detail {

/// "" when every record of the zip file at `path` matches the CRC-32 its directory holds; else
/// what is wrong ("record 'archive/data/3' fails its CRC-32 check", "no zip directory"). Records
/// stored compressed are not checked (LibTorch stores every record uncompressed).
std::string zip_damage(const std::string& path);

}  // namespace detail
}  // namespace io
}  // namespace mlo
