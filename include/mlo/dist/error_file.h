#pragma once
/// \file
/// A failing worker's message for its launcher. torchrun gives each worker a file to write its
/// error into (`TORCHELASTIC_ERROR_FILE`) and shows that message in its failure summary (without
/// it, the summary says only "To enable traceback see ..."). `mlo::guard` and the `mlo` tool
/// write it when a program ends with an error.

#include <string>

namespace mlo {
namespace dist {

/// Writes `message` to the file `TORCHELASTIC_ERROR_FILE` names, as torchrun reads it
/// (`{"message": ..., "timestamp": ...}`); nothing when the variable is unset. Never throws:
/// a file that cannot be written is skipped (the message is on stderr anyway).
void write_error_file(const std::string& message) noexcept;

}  // namespace dist
}  // namespace mlo
