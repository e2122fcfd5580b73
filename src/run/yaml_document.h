// Reading a configuration's text as exactly one YAML document.
//
// yaml-cpp's multi-document reader (YAML::LoadAll) never returns on some malformed text (a
// stray ',' at the top level makes its parser start a new, empty document at the same place
// for ever), and its single-document reader ignores whatever follows the first document. This
// reader parses the first document and looks at most two documents further, so it always
// returns, and refuses text after the first document instead of ignoring it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace mlo {
namespace run {

/// Parses `text` as one YAML document; `source` names it in messages ("FILE:LINE:COL: ...").
/// An empty text is a null node. Throws mlo::Error on a syntax error, on a second document
/// (after `---` or `...`) and where the parser cannot go on at all.
YAML::Node load_one_document(const std::string& text, const std::string& source);

}  // namespace run
}  // namespace mlo
