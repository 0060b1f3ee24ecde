// The checks the job spec readers (job_spec_parse.cc) share: each refuses a value with an
// INVALID_ARGUMENT that names the key, the value and, past a limit, the limit.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/limits.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/mark.h"
#include "yaml-cpp/parser.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::common::job_spec_internal {

absl::Status Invalid(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
}

// INVALID_ARGUMENT naming `key`, the value and the limit when value > limit.
absl::Status AtMost(const std::string& key, int64_t value, int64_t limit, const char* limit_name) {
  if (value <= limit) return absl::OkStatus();
  return Invalid(key, absl::StrCat(value, " is over the limit of ", limit, " (", limit_name,
                                   " in common/limits.h)"));
}

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
size_t Utf8SequenceLength(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, cp = lead & 0x07;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  const bool surrogate = cp >= 0xd800 && cp <= 0xdfff;
  return overlong || surrogate || cp > 0x10ffff ? 0 : n;
}

}  // namespace

// Text a user wrote (a name, a path): at most `limit` bytes of valid UTF-8 without control
// characters, so that it prints, logs and round-trips through YAML as it was given.
absl::Status CheckText(const std::string& key, const std::string& text, int64_t limit,
                       const char* limit_name) {
  if (static_cast<int64_t>(text.size()) > limit) {
    return Invalid(key, absl::StrCat("length ", text.size(), " bytes is over the limit of ", limit,
                                     " (", limit_name, " in common/limits.h)"));
  }
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      return Invalid(
          key, absl::StrCat("control character 0x", absl::Hex(c, absl::kZeroPad2), " at byte ", i));
    }
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return Invalid(key, absl::StrCat("not valid UTF-8 at byte ", i));
    i += n;
  }
  return absl::OkStatus();
}

// A finite floating-point value in (0, kMaxOptimizerValue], or [0, kMaxOptimizerValue] when
// `zero_ok`. NaN and infinities are refused (they would poison every weight they touch).
absl::Status CheckOptimizerValue(const std::string& key, double value, bool zero_ok) {
  const bool low_ok = zero_ok ? value >= 0 : value > 0;
  if (low_ok && value <= kMaxOptimizerValue) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be a finite number in ", zero_ok ? "[0, " : "(0, ",
                                   static_cast<int64_t>(kMaxOptimizerValue),
                                   "] (kMaxOptimizerValue in common/limits.h), got ", value));
}

// Refuses keys of `node` that are not in `allowed`, naming the full dotted key.
absl::Status CheckKeys(const YAML::Node& node, const std::string& prefix,
                       const std::set<std::string>& allowed) {
  if (!node.IsMap()) return Invalid(prefix, "must be a mapping");
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string full = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key '", full, "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Walks the parser's events of one document, keeping for each open mapping the line of every
// scalar key seen. A key that is an alias or a collection has no text to compare and is skipped.
class DuplicateKeyFinder : public YAML::EventHandler {
 public:
  const absl::Status& status() const { return status_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Leaf(mark, "~", true); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Leaf(mark, "", false); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string& value) override {
    Leaf(mark, value, true);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Open(false);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Open(true);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Collection {
    bool map = false;
    std::string path;                  // dotted path of this collection; "" at the root
    bool at_key = true;                // map: the next node is a key
    std::string key;                   // map: the key whose value comes next
    size_t index = 0;                  // sequence: index of the next item
    std::map<std::string, int> lines;  // map: 1-based line of each scalar key
  };

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : absl::StrCat(path, ".", key);
  }

  // Path of the node that comes next in the innermost collection.
  std::string NextPath() const {
    if (open_.empty()) return "";
    const Collection& c = open_.back();
    if (!c.map) return absl::StrCat(c.path, "[", c.index, "]");
    return Join(c.path, c.at_key ? "?" : c.key);
  }

  // A whole node ended in the innermost collection: a key (its value comes next), a value or an
  // item.
  void NodeDone(const std::string& key) {
    if (open_.empty()) return;
    Collection& c = open_.back();
    if (!c.map) {
      ++c.index;
    } else if (c.at_key) {
      c.key = key;
      c.at_key = false;
    } else {
      c.at_key = true;
    }
  }

  void Leaf(const YAML::Mark& mark, const std::string& text, bool comparable) {
    if (!open_.empty() && open_.back().map && open_.back().at_key && comparable && status_.ok()) {
      Collection& c = open_.back();
      const int line = mark.line + 1;
      auto [it, inserted] = c.lines.emplace(text, line);
      if (!inserted) {
        status_ = Invalid(Join(c.path, text), absl::StrCat("duplicate key at line ", line,
                                                           " (first at line ", it->second, ")"));
      }
    }
    NodeDone(comparable ? text : "?");
  }

  void Open(bool map) {
    Collection c;
    c.map = map;
    c.path = NextPath();
    open_.push_back(std::move(c));
  }

  void Close() {
    if (open_.empty()) return;
    open_.pop_back();
    NodeDone("?");
  }

  std::vector<Collection> open_;
  absl::Status status_;
};

}  // namespace

absl::Status CheckDuplicateKeys(const std::string& yaml_text) {
  std::istringstream in(yaml_text);
  YAML::Parser parser(in);
  DuplicateKeyFinder finder;
  parser.HandleNextDocument(finder);
  return finder.status();
}

// A table's own pooling: "" (model.pooling's), sum or mean.
absl::Status CheckPooling(const std::string& key, const std::string& pooling) {
  if (pooling.empty() || pooling == "sum" || pooling == "mean") return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be sum or mean, got '", pooling, "'"));
}

// The names embedding/row_dtype.h parses (common/ does not depend on embedding/).
absl::Status CheckRowDtype(const std::string& key, const std::string& dtype) {
  if (dtype == "fp32" || dtype == "fp16" || dtype == "bf16") return absl::OkStatus();
  return Invalid(key, absl::StrCat("'", dtype, "' is not one of fp32, fp16, bf16"));
}

// What the model costs a worker, in int64 so that no product overflows (every factor is limited
// already): the dense parameters, and the largest activation of one batch.
absl::Status CheckModelSize(const JobSpec& spec) {
  int64_t params = 0;
  int64_t widest = spec.dense_features;
  auto mlp = [&params, &widest](int64_t in, const std::vector<int>& widths) {
    for (int w : widths) {
      params += in * w + w;
      widest = std::max<int64_t>(widest, w);
      in = w;
    }
  };
  const int64_t top_input = spec.TopInputWidth();
  mlp(spec.dense_features, spec.bottom_mlp);
  mlp(top_input, spec.top_mlp);
  const int64_t tables = static_cast<int64_t>(spec.tables.size());
  widest = std::max({widest, top_input, (tables + 1) * spec.embedding_dim});
  int64_t cross = 0;
  if (spec.interaction == "dcnv2") {
    // Each cross layer: V [rank x width], U [width x rank], b [width].
    cross = spec.cross_layers * (2 * spec.low_rank * top_input + top_input);
    widest = std::max<int64_t>(widest, spec.low_rank);
  }
  if (params + cross > kMaxDenseParameters) {
    return Invalid("model", absl::StrCat("the dense model has ", params + cross, " parameters (",
                                         cross > 0 ? absl::StrCat(params, " in the MLPs, ", cross,
                                                                  " in the cross layers")
                                                   : "its MLPs",
                                         "), over the limit of ", kMaxDenseParameters,
                                         " (kMaxDenseParameters in common/limits.h)"));
  }
  const int64_t activation = widest * spec.batch_size;
  if (activation > kMaxActivationElements) {
    return Invalid(
        "training.batch_size",
        absl::StrCat("batch_size ", spec.batch_size, " x the widest layer ", widest, " = ",
                     activation, " floats per activation, over the limit of ",
                     kMaxActivationElements, " (kMaxActivationElements in common/limits.h)"));
  }
  return absl::OkStatus();
}

}  // namespace dlrm::common::job_spec_internal
