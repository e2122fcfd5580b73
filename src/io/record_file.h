#pragma once
// Part of src/io: the record framing of TensorBoard event files (TFRecord). Each record is
//   length (uint64, little-endian) | masked CRC-32C of the length's 8 bytes (uint32)
//   | data (length bytes) | masked CRC-32C of the data (uint32)
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32). CRC-32C is Castagnoli's
// polynomial (0x1EDC6F41, reflected), computed with Boost.CRC.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace mlo {
namespace io {

/// CRC-32C of `size` bytes (crc32c("123456789") == 0xE3069283).
uint32_t crc32c(const void* data, size_t size);

/// The checksum a record stores: CRC-32C, rotated right by 15 bits, plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

/// Appends one record holding `data` to `out`.
void write_record(std::ostream& out, const std::string& data);

/// The records of the file at `path`, in order ({} when it does not exist), up to the first
/// that is cut short (a crash while it was written) or damaged (a checksum that does not
/// match, e.g. a zero-filled tail after a power loss). For a damaged one, `damage` (when given)
/// is set to "the record at byte <offset> is damaged (<which> checksum)"; else it is cleared.
std::vector<std::string> read_records(const std::string& path, std::string* damage = nullptr);

}  // namespace io
}  // namespace mlo
