#include "record_file.h"

#include <boost/crc.hpp>

#include <fstream>
#include <ostream>

namespace mlo {
namespace io {
namespace {

void put_le(char* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get_le(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void write_record(std::ostream& out, const std::string& data) {
  char header[12];
  put_le(header, data.size(), 8);
  put_le(header + 8, masked_crc32c(header, 8), 4);
  char footer[4];
  put_le(footer, masked_crc32c(data.data(), data.size()), 4);
  out.write(header, sizeof(header));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.write(footer, sizeof(footer));
}

std::vector<std::string> read_records(const std::string& path, std::string* damage) {
  std::vector<std::string> records;
  if (damage) damage->clear();
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return records;
  const auto damaged = [&](uint64_t offset, const char* which) {
    if (damage) {
      *damage = "the record at byte " + std::to_string(offset) + " is damaged (" + which +
                " checksum)";
    }
    return records;
  };
  uint64_t offset = 0;
  while (true) {
    char header[12];
    in.read(header, sizeof(header));
    if (in.gcount() < static_cast<std::streamsize>(sizeof(header))) break;  // end, or cut short
    if (get_le(header + 8, 4) != masked_crc32c(header, 8)) return damaged(offset, "length");
    const uint64_t length = get_le(header, 8);
    if (length > (uint64_t{1} << 32)) return damaged(offset, "length");  // no event is 4 GiB
    std::string data(length, '\0');
    in.read(data.data(), static_cast<std::streamsize>(length));
    if (static_cast<uint64_t>(in.gcount()) < length) break;
    char footer[4];
    in.read(footer, sizeof(footer));
    if (in.gcount() < static_cast<std::streamsize>(sizeof(footer))) break;
    if (get_le(footer, 4) != masked_crc32c(data.data(), data.size())) {
      return damaged(offset, "data");
    }
    records.push_back(std::move(data));
    offset += sizeof(header) + length + sizeof(footer);
  }
  return records;
}

}  // namespace io
}  // namespace mlo
