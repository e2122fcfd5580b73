#include "yaml_document.h"

#include <mlo/base/error.h>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <sstream>
#include <vector>

namespace mlo {
namespace run {
namespace {

std::string at(const std::string& source, const YAML::Mark& mark) {
  if (mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// Remembers where a document starts and ignores its contents: only the positions of the
// documents matter here (the nodes come from YAML::Load).
class DocumentStart : public YAML::EventHandler {
 public:
  YAML::Mark mark;

  void OnDocumentStart(const YAML::Mark& where) override { mark = where; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

YAML::Node load_one_document(const std::string& text, const std::string& source) {
  try {
    YAML::Node root = YAML::Load(text);
    // Where the first three documents start. A parser stuck on a token it cannot place starts
    // each next document where the last one started; the third tells a stuck second document
    // from a real one.
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    std::vector<YAML::Mark> starts;
    for (int document = 0; document < 3; ++document) {
      DocumentStart start;
      if (!parser.HandleNextDocument(start)) break;
      if (!starts.empty() && start.mark.pos == starts.back().pos) {
        // (the position counts the decoded text: quoted only where it is plain ASCII)
        const size_t pos = static_cast<size_t>(start.mark.pos);
        const bool plain = pos < text.size() && text[pos] > ' ' && text[pos] < 0x7f;
        const std::string token = plain ? "'" + text.substr(pos, 1) + "'" : "a token";
        throw Error(at(source, start.mark) + ": YAML syntax error: unexpected " + token +
                    " where a key or a value should be");
      }
      starts.push_back(start.mark);
    }
    if (starts.size() > 1) {
      const size_t pos = static_cast<size_t>(starts[1].pos);
      const std::string marker = pos <= text.size() && text.compare(pos, 3, "---") == 0 ? "---" : "...";
      throw Error(at(source, starts[1]) + ": (top level): a second YAML document (after '" +
                  marker +
                  "'); an experiment's configuration is one document: merge them or remove the '" +
                  marker + "'");
    }
    return root;
  } catch (const YAML::Exception& e) {
    throw Error(at(source, e.mark) + ": YAML syntax error: " + e.msg);
  }
}

}  // namespace run
}  // namespace mlo
