#include "event_message.h"

#include <cstring>

namespace mlo {
namespace io {
namespace event {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_tag(std::string& out, uint32_t field, WireType type) { put_varint(out, field << 3 | type); }

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_tag(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_tag(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

// The fields every event starts with (proto3 leaves out a step of 0, as protobuf does).
std::string header(double wall_time, int64_t step) {
  std::string out;
  put_double(out, 1, wall_time);
  if (step != 0) {
    put_tag(out, 2, kVarint);
    put_varint(out, static_cast<uint64_t>(step));
  }
  return out;
}

// A cursor over one message's bytes; every read fails (false) rather than run past the end.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : data_(bytes.data()), end_(data_ + bytes.size()) {}
  Reader(const char* data, const char* end) : data_(data), end_(end) {}
  bool done() const { return data_ == end_; }
  bool varint(uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (data_ == end_) return false;
      const auto byte = static_cast<unsigned char>(*data_++);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  // A field's tag; `field` and `type` out.
  bool tag(uint32_t& field, uint32_t& type) {
    uint64_t key = 0;
    if (!varint(key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) return false;
    field = static_cast<uint32_t>(key >> 3);
    type = static_cast<uint32_t>(key & 7);
    return true;
  }
  // A length-delimited field's bytes, as a reader of their own.
  bool bytes(Reader& inner) {
    uint64_t length = 0;
    if (!varint(length) || length > static_cast<uint64_t>(end_ - data_)) return false;
    inner = Reader(data_, data_ + length);
    data_ += length;
    return true;
  }
  // Skips a field of wire type `type` (after its tag).
  bool skip(uint32_t type) {
    uint64_t ignored = 0;
    Reader inner(data_, data_);
    switch (type) {
      case kVarint:
        return varint(ignored);
      case kFixed64:
        return advance(8);
      case kBytes:
        return bytes(inner);
      case kFixed32:
        return advance(4);
      default:
        return false;  // (groups are never written by any event writer)
    }
  }

 private:
  bool advance(size_t n) {
    if (static_cast<size_t>(end_ - data_) < n) return false;
    data_ += n;
    return true;
  }
  const char* data_;
  const char* end_;
};

// Whether a Summary.Value holds a tensor; false on malformed bytes (reported through `ok`).
bool value_has_tensor(Reader value, bool& ok) {
  bool tensor = false;
  while (!value.done()) {
    uint32_t field = 0, type = 0;
    if (!value.tag(field, type)) return ok = false;
    if (field == 8) tensor = true;
    if (!value.skip(type)) return ok = false;
  }
  return tensor;
}

}  // namespace

std::string file_version(double wall_time) {
  std::string out = header(wall_time, 0);
  put_bytes(out, 3, "brain.Event:2");
  return out;
}

std::string scalars(double wall_time, int64_t step,
                    const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string entry;
    put_bytes(entry, 1, tag);
    put_float(entry, 2, value);  // (a oneof member: written also when it is 0)
    put_bytes(summary, 1, entry);
  }
  std::string out = header(wall_time, step);
  put_bytes(out, 5, summary);
  return out;
}

std::string text(double wall_time, int64_t step, const std::string& tag, const std::string& text) {
  std::string dim;  // Dim { size: 1 }
  put_tag(dim, 1, kVarint);
  put_varint(dim, 1);
  std::string shape;
  put_bytes(shape, 2, dim);
  std::string tensor;
  put_tag(tensor, 1, kVarint);
  put_varint(tensor, 7);  // DT_STRING
  put_bytes(tensor, 2, shape);
  put_bytes(tensor, 8, text);
  std::string plugin;
  put_bytes(plugin, 1, "text");
  std::string metadata;
  put_bytes(metadata, 1, plugin);
  std::string entry;
  put_bytes(entry, 1, tag);
  put_bytes(entry, 8, tensor);
  put_bytes(entry, 9, metadata);
  std::string summary;
  put_bytes(summary, 1, entry);
  std::string out = header(wall_time, step);
  put_bytes(out, 5, summary);
  return out;
}

std::optional<Summary> read(const std::string& bytes) {
  Summary out;
  Reader event(bytes);
  while (!event.done()) {
    uint32_t field = 0, type = 0;
    if (!event.tag(field, type)) return std::nullopt;
    if (field == 2 && type == kVarint) {
      uint64_t step = 0;
      if (!event.varint(step)) return std::nullopt;
      out.step = static_cast<int64_t>(step);
    } else if (field == 3 && type == kBytes) {
      Reader ignored(nullptr, nullptr);
      if (!event.bytes(ignored)) return std::nullopt;
      out.file_version = true;
    } else if (field == 5 && type == kBytes) {
      Reader summary(nullptr, nullptr);
      if (!event.bytes(summary)) return std::nullopt;
      while (!summary.done()) {
        uint32_t f = 0, t = 0;
        if (!summary.tag(f, t)) return std::nullopt;
        if (f == 1 && t == kBytes) {
          Reader value(nullptr, nullptr);
          if (!summary.bytes(value)) return std::nullopt;
          bool ok = true;
          if (value_has_tensor(value, ok)) out.text = true;
          if (!ok) return std::nullopt;
        } else if (!summary.skip(t)) {
          return std::nullopt;
        }
      }
    } else if (!event.skip(type)) {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace event
}  // namespace io
}  // namespace mlo
