#include "client/output_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace dlrm::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Value;

constexpr char kTypeUrlPrefix[] = "type.googleapis.com";

// The JSON printer reads the message's wire form, where a map's entries come in the order of its
// hash table, which differs from process to process: a job's progress.metrics printed its keys in
// a new order on every call. Serialized deterministically (map entries by key), they come sorted.
std::string JsonOf(const google::protobuf::Message& message, bool indented) {
  static google::protobuf::util::TypeResolver* const resolver =
      google::protobuf::util::NewTypeResolverForDescriptorPool(
          kTypeUrlPrefix, google::protobuf::DescriptorPool::generated_pool());
  std::string binary;
  {
    google::protobuf::io::StringOutputStream stream(&binary);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    (void)message.SerializePartialToCodedStream(&coded);
  }
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  options.add_whitespace = indented;
  std::string out;
  // Only fails for unresolvable Any types, which these messages do not hold.
  (void)google::protobuf::util::BinaryToJsonString(
      resolver, absl::StrCat(kTypeUrlPrefix, "/", message.GetDescriptor()->full_name()), binary,
      &out, options);
  return out;
}

// --- YAML ---------------------------------------------------------------------------------
// The canonical JSON of a message is parsed into a google.protobuf.Value (so YAML holds exactly
// what JSON holds) and written in block style. Keys follow the message's field order, where the
// descriptor knows them, else sorted.

// Words that YAML 1.1 or 1.2 parsers read as something other than a string when plain.
bool IsYamlKeyword(absl::string_view s) {
  static constexpr absl::string_view kWords[] = {"true", "false", "yes",  "no",  "on",  "off",
                                                 "y",    "n",     "null", "nan", "inf", "~"};
  for (absl::string_view w : kWords) {
    if (absl::EqualsIgnoreCase(s, w)) return true;
  }
  return false;
}

// Conservative: a plain scalar starts with a letter and holds only characters that can neither
// start an indicator nor turn it into a number, bool or null.
bool CanBePlain(absl::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(s.front())) || s.back() == ' ' ||
      s.back() == ':' || IsYamlKeyword(s)) {
    return false;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) continue;
    if (c == ':' && s[i + 1] != ' ') continue;  // "host:port"; ": " would start a mapping
    if (absl::string_view("_-./@()+=, ").find(c) == absl::string_view::npos) return false;
  }
  return true;
}

std::string DoubleQuoted(absl::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(&out, "\\x%02x", c);
        } else {
          out += ch;
        }
    }
  }
  out += "\"";
  return out;
}

// A multi-line string (a job spec) reads best as a literal block; these are the ones a literal
// block holds without an indentation indicator. Lines of only whitespace are left to double
// quotes too, to stay clear of YAML's rules for empty lines.
bool CanBeLiteralBlock(absl::string_view s) {
  if (s.find('\n') == absl::string_view::npos || s.front() == ' ' || s.front() == '\t' ||
      s.front() == '\n') {
    return false;
  }
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return false;
  }
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    if (!line.empty() && line.find_first_not_of(" \t") == absl::string_view::npos) return false;
  }
  return true;
}

// `s` as a literal block: the indicator, then its lines indented by `indent`.
std::string LiteralBlock(absl::string_view s, int indent) {
  const size_t body_end = s.find_last_not_of('\n') + 1;
  const size_t trailing_newlines = s.size() - body_end;
  std::string out = trailing_newlines == 0 ? "|-\n" : (trailing_newlines == 1 ? "|\n" : "|+\n");
  for (absl::string_view line : absl::StrSplit(s.substr(0, body_end), '\n')) {
    if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line);
    out += "\n";
  }
  if (trailing_newlines > 1) out.append(trailing_newlines - 1, '\n');
  return out;
}

std::string YamlNumber(double v) {
  if (std::trunc(v) == v && std::abs(v) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);  // shortest round trip
  return std::string(buffer, result.ptr);
}

// A scalar (or empty container) ending in a newline; a literal block's lines are indented by
// `indent`.
std::string YamlScalar(const Value& v, int indent) {
  switch (v.kind_case()) {
    case Value::kBoolValue:
      return v.bool_value() ? "true\n" : "false\n";
    case Value::kNumberValue:
      return YamlNumber(v.number_value()) + "\n";
    case Value::kStringValue: {
      const std::string& s = v.string_value();
      if (CanBePlain(s)) return s + "\n";
      if (CanBeLiteralBlock(s)) return LiteralBlock(s, indent);
      return DoubleQuoted(s) + "\n";
    }
    case Value::kStructValue:
      return "{}\n";
    case Value::kListValue:
      return "[]\n";
    default:
      return "null\n";
  }
}

bool IsBlock(const Value& v) {
  return (v.has_struct_value() && !v.struct_value().fields().empty()) ||
         (v.has_list_value() && v.list_value().values_size() > 0);
}

// What the descriptor says about a JSON object: a message of `message`'s type, or a map whose
// values are messages of `map_value`'s type (null: scalars), or neither (a Struct document).
struct YamlShape {
  const Descriptor* message = nullptr;
  const Descriptor* map_value = nullptr;
};

// The shape of the value under `key` of an object of shape `parent` (for a list: of its items).
YamlShape ChildShape(const YamlShape& parent, const std::string& key) {
  if (parent.message == nullptr) return {.message = parent.map_value};
  const FieldDescriptor* field = parent.message->FindFieldByName(key);
  if (field == nullptr) return {};
  if (field->is_map()) return {.map_value = field->message_type()->map_value()->message_type()};
  return {.message = field->message_type()};
}

void EmitYaml(const Value& v, int indent, const YamlShape& shape, std::string* out);

// `v` as a sequence item at `indent`; a block is written one level deeper and its first line's
// indentation replaced by "- ".
void EmitYamlItem(const Value& v, int indent, const YamlShape& shape, std::string* out) {
  if (!IsBlock(v)) {
    absl::StrAppend(out, std::string(indent, ' '), "- ", YamlScalar(v, indent + 2));
    return;
  }
  std::string block;
  EmitYaml(v, indent + 2, shape, &block);
  block.replace(indent, 2, "- ");
  absl::StrAppend(out, block);
}

// Writes a non-empty mapping or sequence at `indent`. A message's keys come in field order,
// other keys sorted.
void EmitYaml(const Value& v, int indent, const YamlShape& shape, std::string* out) {
  const std::string pad(indent, ' ');
  if (v.has_list_value()) {
    for (const Value& item : v.list_value().values()) EmitYamlItem(item, indent, shape, out);
    return;
  }
  const auto& fields = v.struct_value().fields();
  std::vector<std::string> keys;
  for (const auto& [key, unused] : fields) keys.push_back(key);
  auto rank = [&shape](const std::string& key) {
    if (shape.message == nullptr) return 0;
    const FieldDescriptor* f = shape.message->FindFieldByName(key);
    return f == nullptr ? shape.message->field_count() : f->index();
  };
  std::sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) {
    const int ra = rank(a);
    const int rb = rank(b);
    return ra != rb ? ra < rb : a < b;
  });
  for (const std::string& key : keys) {
    const Value& value = fields.at(key);
    const std::string label = CanBePlain(key) ? key : DoubleQuoted(key);
    if (IsBlock(value)) {
      absl::StrAppend(out, pad, label, ":\n");
      // Sequences under a key are not indented further (kubectl's style); mappings are.
      EmitYaml(value, value.has_list_value() ? indent : indent + 2, ChildShape(shape, key), out);
    } else {
      absl::StrAppend(out, pad, label, ": ", YamlScalar(value, indent + 2));
    }
  }
}
}  // namespace

const std::vector<std::string>& OutputFormatNames() {
  static const std::vector<std::string> kNames = {"table", "wide", "json", "yaml", "jsonl"};
  return kNames;
}

std::optional<OutputFormat> ParseOutputFormat(std::string_view name) {
  const auto& names = OutputFormatNames();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return static_cast<OutputFormat>(it - names.begin());
}

bool IsDocumentFormat(OutputFormat format) {
  return format == OutputFormat::kJson || format == OutputFormat::kYaml ||
         format == OutputFormat::kJsonl;
}

std::string ToJson(const google::protobuf::Message& message) { return JsonOf(message, false); }

std::string ToYaml(const google::protobuf::Message& message) {
  Value tree;
  // The JSON printer's own output always parses back.
  (void)google::protobuf::util::JsonStringToMessage(JsonOf(message, false), &tree);
  if (!IsBlock(tree)) return YamlScalar(tree, 2);
  YamlShape shape{.message = message.GetDescriptor()};
  // A google.protobuf.Struct document has no field order of its own.
  if (shape.message == google::protobuf::Struct::descriptor()) shape.message = nullptr;
  std::string out;
  EmitYaml(tree, 0, shape, &out);
  return out;
}

std::string ToDocument(const google::protobuf::Message& message, OutputFormat format) {
  switch (format) {
    case OutputFormat::kYaml:
      return ToYaml(message);
    case OutputFormat::kJson: {
      std::string json = JsonOf(message, true);
      if (!absl::EndsWith(json, "\n")) json += "\n";
      return json;
    }
    default:
      return JsonOf(message, false) + "\n";
  }
}

std::string VersionDocument(const std::string& client_version,
                            const std::optional<std::string>& server_version, OutputFormat format) {
  Value client;
  client.set_string_value(client_version);
  Value server;
  if (server_version.has_value()) {
    server.set_string_value(*server_version);
  } else {
    server.set_null_value({});
  }
  if (format == OutputFormat::kYaml) {
    google::protobuf::Struct versions;
    (*versions.mutable_fields())["client_version"] = client;
    (*versions.mutable_fields())["server_version"] = server;
    return ToYaml(versions);  // keys sorted
  }
  // Written out, not printed from a Struct: a Struct's keys come in no fixed order.
  if (format == OutputFormat::kJson) {
    return absl::StrCat("{\n \"client_version\": ", ToJson(client),
                        ",\n \"server_version\": ", ToJson(server), "\n}\n");
  }
  return absl::StrCat("{\"client_version\":", ToJson(client),
                      ",\"server_version\":", ToJson(server), "}\n");
}

std::string HistoryDocument(const std::string& job_id,
                            const std::vector<dlrm::v1::JobStateChange>& history,
                            OutputFormat format) {
  Value id;
  id.set_string_value(job_id);
  if (format == OutputFormat::kYaml) {
    std::string out = absl::StrCat("job_id: ", YamlScalar(id, 2), "history:");
    if (history.empty()) return out + " []\n";
    out += "\n";
    const YamlShape shape{.message = dlrm::v1::JobStateChange::descriptor()};
    for (const dlrm::v1::JobStateChange& change : history) {
      Value tree;
      // The JSON printer's own output always parses back.
      (void)google::protobuf::util::JsonStringToMessage(JsonOf(change, false), &tree);
      EmitYamlItem(tree, 0, shape, &out);  // a sequence under a key is not indented further
    }
    return out;
  }
  // Written out, not printed from a Struct: a Struct's keys come in no fixed order. The changes
  // are the printer's indented objects, one level deeper.
  std::string out = absl::StrCat("{\n \"job_id\": ", ToJson(id), ",\n \"history\": [");
  for (size_t i = 0; i < history.size(); ++i) {
    const std::string change(absl::StripTrailingAsciiWhitespace(JsonOf(history[i], true)));
    absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "  ",
                    absl::StrReplaceAll(change, {{"\n", "\n  "}}));
  }
  absl::StrAppend(&out, history.empty() ? "]" : "\n ]", "\n}\n");
  return out;
}

std::string ShortestFloats(absl::string_view yaml) {
  constexpr absl::string_view kStarts = " \t\n[{,";  // what a plain scalar may follow
  std::string out;
  out.reserve(yaml.size());
  char quote = 0;  // inside a quoted scalar: its quote
  for (size_t i = 0; i < yaml.size();) {
    const char c = yaml[i];
    const char before = i == 0 ? '\n' : yaml[i - 1];
    if (quote != 0) {  // copied as it is; the spec writer keeps quoted scalars on one line
      if (c == '\\' && quote == '"' && i + 1 < yaml.size()) {
        absl::StrAppend(&out, yaml.substr(i, 2));
        i += 2;
        continue;
      }
      if (c == quote || c == '\n') quote = 0;
    } else if ((c == '"' || c == '\'') && absl::StrContains(" \t\n[{,:", before)) {
      quote = c;
    } else if (c == '#' && (before == ' ' || before == '\n')) {  // a comment, as it is
      const size_t end = std::min(yaml.find('\n', i), yaml.size());
      absl::StrAppend(&out, yaml.substr(i, end - i));
      i = end;
      continue;
    } else if (absl::StrContains(kStarts, before) &&
               (absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      // A scalar from here to a flow indicator or the line's end.
      const size_t end = std::min(yaml.find_first_of(",]}\n", i), yaml.size());
      const absl::string_view token = absl::StripTrailingAsciiWhitespace(yaml.substr(i, end - i));
      double value = 0;
      const auto parsed = std::from_chars(token.data(), token.data() + token.size(), value);
      const auto digits = std::count_if(token.begin(), token.end(), [](char d) {
        return absl::ascii_isdigit(static_cast<unsigned char>(d));
      });
      // Only a float written in 16 digits or more (as the spec writer writes every float): a
      // shorter one is how someone wrote it, and may be a string to its reader ("1.10").
      if (digits >= 16 && token.find_first_of(".eE") != absl::string_view::npos &&
          parsed.ec == std::errc() && parsed.ptr == token.data() + token.size() &&
          std::isfinite(value)) {
        char buffer[64];
        const auto written = std::to_chars(buffer, buffer + sizeof(buffer), value);
        std::string shortest(buffer, written.ptr);
        // Still a float to a YAML reader: "0.5" and "1e+20" are, "3" would be an int.
        if (shortest.find_first_of(".e") == std::string::npos) shortest += ".0";
        out += shortest;
        i += token.size();
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

}  // namespace dlrm::client
