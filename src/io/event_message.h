#pragma once
// Part of src/io: TensorBoard's `Event` messages in protobuf's wire format, encoded and decoded
// by hand (no protobuf library): the few fields mlo writes, with the field numbers of the
// format's own definitions (TensorFlow's event.proto, summary.proto, tensor.proto,
// tensor_shape.proto, types.proto), so any reader of event files parses them.
//
//   Event    { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary  { repeated Value value = 1; }
//   Value    { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//              SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }    PluginData { string plugin_name = 1; }
//   TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2;
//                 repeated bytes string_val = 8; }
//   TensorShapeProto { repeated Dim dim = 2; }         Dim { int64 size = 1; }

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace io {
namespace event {

/// The first event of a file: its version, "brain.Event:2".
std::string file_version(double wall_time);
/// One event at `step` holding every (tag, value) as a scalar (`simple_value`, a 32-bit float).
std::string scalars(double wall_time, int64_t step,
                    const std::vector<std::pair<std::string, float>>& values);
/// One event at `step` holding `text` under `tag` for the text plugin (a string tensor).
std::string text(double wall_time, int64_t step, const std::string& tag, const std::string& text);

/// What a resume needs to know of an event.
struct Summary {
  int64_t step = 0;
  bool file_version = false;  ///< the file's first event
  bool text = false;          ///< holds a tensor (a text), not scalars only
};
/// Reads `bytes` as an event; nullopt when they are not one (a damaged record).
std::optional<Summary> read(const std::string& bytes);

}  // namespace event
}  // namespace io
}  // namespace mlo
