#include "zip_check.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

namespace mlo {
namespace io {
namespace detail {
namespace {

// The zip format's little-endian integers.
uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;

class File {
 public:
  explicit File(const std::string& path) : in_(path, std::ios::binary) {
    in_.seekg(0, std::ios::end);
    size_ = in_.good() ? static_cast<uint64_t>(in_.tellg()) : 0;
  }
  uint64_t size() const { return size_; }
  // `n` bytes at `offset`, or an empty vector when they are not all there.
  std::vector<unsigned char> read(uint64_t offset, uint64_t n) {
    if (offset > size_ || n > size_ - offset) return {};
    std::vector<unsigned char> bytes(n);
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n));
    if (!in_) return {};
    return bytes;
  }
  // The CRC-32 of `n` bytes at `offset`, read in pieces; false when they are not all there.
  bool crc(uint64_t offset, uint64_t n, uint32_t* out) {
    if (offset > size_ || n > size_ - offset) return false;
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    std::vector<char> buffer(1 << 20);
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
      const auto piece = static_cast<std::streamsize>(std::min<uint64_t>(n, buffer.size()));
      if (!in_.read(buffer.data(), piece)) return false;
      crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(piece));
      n -= static_cast<uint64_t>(piece);
    }
    *out = static_cast<uint32_t>(crc);
    return true;
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

}  // namespace

std::string zip_damage(const std::string& path) {
  File file(path);
  // The end-of-directory record: the last 22 bytes, unless a comment follows it.
  const uint64_t tail_size = std::min<uint64_t>(file.size(), 22 + 65535);
  const auto tail = file.read(file.size() - tail_size, tail_size);
  if (tail.size() < 22) return "it is too short to be a zip archive";
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail.size()) - 22; i >= 0; --i) {
    if (le(&tail[static_cast<size_t>(i)], 4) == kEndOfDirectory) {
      end = i;
      break;
    }
  }
  if (end < 0) return "it has no zip directory (cut short?)";
  const unsigned char* e = &tail[static_cast<size_t>(end)];
  uint64_t entries = le(e + 10, 2);
  uint64_t directory_size = le(e + 12, 4);
  uint64_t directory = le(e + 16, 4);
  const uint64_t end_offset = file.size() - tail_size + static_cast<uint64_t>(end);
  if (end_offset >= 20) {
    const auto locator = file.read(end_offset - 20, 20);
    if (!locator.empty() && le(locator.data(), 4) == kZip64Locator) {
      const auto end64 = file.read(le(locator.data() + 8, 8), 56);
      if (end64.empty() || le(end64.data(), 4) != kZip64End)
        return "its zip64 directory is damaged";
      entries = le(end64.data() + 32, 8);
      directory_size = le(end64.data() + 40, 8);
      directory = le(end64.data() + 48, 8);
    }
  }
  const auto dir = file.read(directory, directory_size);
  if (dir.size() != directory_size) return "its zip directory is cut short";
  size_t at = 0;
  for (uint64_t n = 0; n < entries; ++n) {
    if (at + 46 > dir.size() || le(&dir[at], 4) != kDirectoryEntry) {
      return "its zip directory is damaged";
    }
    const unsigned char* h = &dir[at];
    const uint64_t method = le(h + 10, 2);
    const auto crc = static_cast<uint32_t>(le(h + 16, 4));
    uint64_t compressed = le(h + 20, 4);
    uint64_t uncompressed = le(h + 24, 4);
    const size_t name_size = le(h + 28, 2);
    const size_t extra_size = le(h + 30, 2);
    const size_t comment_size = le(h + 32, 2);
    uint64_t local = le(h + 42, 4);
    if (at + 46 + name_size + extra_size + comment_size > dir.size()) {
      return "its zip directory is damaged";
    }
    const std::string name(reinterpret_cast<const char*>(h + 46), name_size);
    // Zip64: the fields set to 0xFFFFFFFF are in the extra field 0x0001, in this order.
    for (size_t x = 0; x + 4 <= extra_size;) {
      const unsigned char* f = h + 46 + name_size + x;
      const size_t id = le(f, 2);
      const size_t size = le(f + 2, 2);
      if (id == 0x0001) {
        size_t k = 4;
        for (uint64_t* field : {&uncompressed, &compressed, &local}) {
          if (*field == 0xFFFFFFFFu && k + 8 <= size + 4) {
            *field = le(f + k, 8);
            k += 8;
          }
        }
      }
      x += 4 + size;
    }
    at += 46 + name_size + extra_size + comment_size;
    const auto header = file.read(local, 30);
    if (header.empty() || le(header.data(), 4) != kLocalHeader) {
      return "the local header of record '" + name + "' is damaged";
    }
    if (method != 0) continue;  // compressed: LibTorch never writes such records
    if (compressed != uncompressed) return "record '" + name + "' has inconsistent sizes";
    const uint64_t data = local + 30 + le(header.data() + 26, 2) + le(header.data() + 28, 2);
    uint32_t actual = 0;
    if (!file.crc(data, compressed, &actual)) return "record '" + name + "' is cut short";
    if (actual != crc) return "record '" + name + "' fails its CRC-32 check";
  }
  return "";
}

}  // namespace detail
}  // namespace io
}  // namespace mlo
