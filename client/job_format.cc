#include "client/job_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace dlrm::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Value;

std::string Strip(std::string name, const std::string& prefix) {
  if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
  return name;
}

// Formats rows as left-aligned columns separated by two spaces.
std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string JsonOf(const google::protobuf::Message& message, bool indented) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  options.add_whitespace = indented;
  std::string out;
  // Only fails for unresolvable Any types, which these messages do not hold.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
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

std::string Count(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// "worker-0, worker-1", at most `limit` labels then "and N more".
std::string LabelList(const std::vector<std::string>& labels, size_t limit = 5) {
  if (labels.size() <= limit) return absl::StrJoin(labels, ", ");
  std::vector<std::string> head(labels.begin(), labels.begin() + limit);
  return absl::StrCat(absl::StrJoin(head, ", "), " and ", labels.size() - limit, " more");
}

std::string WithLabels(std::string counted, const std::vector<std::string>& labels) {
  if (labels.empty()) return counted;
  return absl::StrCat(counted, " (", LabelList(labels), ")");
}

std::string PendingMessage(const dlrm::v1::Job& job, const ClusterSnapshot* cluster) {
  std::string message = absl::StrCat(
      "waiting for ", Count(job.requested_workers(), "idle worker", "idle workers"), " and ",
      job.requested_ps() > 0 ? Count(job.requested_ps(), "parameter server", "parameter servers")
                             : std::string("at least 1 parameter server"));
  if (cluster != nullptr && cluster->view.has_value()) {
    std::vector<std::string> idle;
    int busy = 0;
    std::vector<const dlrm::v1::Member*> ps;
    for (const auto& m : cluster->view->members()) {
      if (m.state() != dlrm::v1::MEMBER_STATE_ALIVE) continue;
      if (m.role() == dlrm::v1::ROLE_WORKER) {
        if (m.job_id().empty()) {
          idle.push_back(MemberLabel(m));
        } else {
          ++busy;
        }
      } else if (m.role() == dlrm::v1::ROLE_PS) {
        ps.push_back(&m);
      }
    }
    std::sort(ps.begin(), ps.end(), [](const dlrm::v1::Member* a, const dlrm::v1::Member* b) {
      return a->shard_index() < b->shard_index();
    });
    std::vector<std::string> ps_labels;
    for (const auto* m : ps) ps_labels.push_back(MemberLabel(*m));
    std::vector<std::string> has = {
        WithLabels(Count(static_cast<int64_t>(idle.size()), "idle worker", "idle workers"), idle)};
    if (busy > 0) has.push_back(Count(busy, "busy worker", "busy workers"));
    has.push_back(
        WithLabels(Count(static_cast<int64_t>(ps.size()), "parameter server", "parameter servers"),
                   ps_labels));
    absl::StrAppend(&message, "; the cluster has ", absl::StrJoin(has, ", "));
  }
  if (cluster != nullptr && cluster->pending_job_ids.has_value()) {
    const auto& ids = *cluster->pending_job_ids;
    const auto self = std::find(ids.begin(), ids.end(), job.job_id());
    if (self != ids.end() && self != ids.begin()) {
      absl::StrAppend(&message, "; queued behind ",
                      LabelList(std::vector<std::string>(ids.begin(), self)),
                      " (jobs start in submission order)");
    }
  }
  return message;
}

std::string Auc(const dlrm::v1::Job& job) {
  if (job.state() != dlrm::v1::JOB_STATE_SUCCEEDED) return "-";
  return absl::StrFormat("%.4f", job.final_metrics().auc());
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// The MESSAGE column of the job tables: one line. The coordinator's message of a job that lost a
// member with no recovery left is "<the loss>; no recovery left (N of max_recoveries N used);
// recovery 1: <loss>; ...": the verdict goes first, then the loss that ended the job.
std::string TableMessage(const dlrm::v1::Job& job, const ClusterSnapshot* cluster) {
  std::string message = JobMessage(job, cluster);
  constexpr char kNoRecoveryLeft[] = "; no recovery left (";
  const size_t verdict = message.find(kNoRecoveryLeft);
  if (job.state() == dlrm::v1::JOB_STATE_FAILED && verdict != std::string::npos) {
    const size_t start = verdict + 2;  // past "; "
    const size_t close = message.find(')', start);
    if (close != std::string::npos) {
      message =
          absl::StrCat(message.substr(start, close + 1 - start), ": ", message.substr(0, verdict));
    }
  }
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::replace(message.begin(), message.end(), '\r', ' ');
  return OrDash(message);
}

std::string PsColumn(const dlrm::v1::Job& job) {
  if (!job.ps_addresses().empty()) return absl::StrCat(job.ps_addresses_size());
  return job.requested_ps() == 0 ? "all" : absl::StrCat(job.requested_ps());
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

std::string StateName(dlrm::v1::JobState state) {
  return Strip(dlrm::v1::JobState_Name(state), "JOB_STATE_");
}
std::string RoleName(dlrm::v1::Role role) { return Strip(dlrm::v1::Role_Name(role), "ROLE_"); }
std::string MemberStateName(dlrm::v1::MemberState state) {
  return Strip(dlrm::v1::MemberState_Name(state), "MEMBER_STATE_");
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

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string HistoryLine(const dlrm::v1::JobStateChange& change) {
  return absl::StrFormat("%-20s  %-10s  %s", UtcTime(change.time_ms()), StateName(change.state()),
                         change.message());
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

std::string JobDescription(const dlrm::v1::Job& job, const ClusterSnapshot* cluster,
                           const std::vector<std::string>& checkpoints) {
  std::string out = JobDetail(job, /*wide=*/true, cluster);
  absl::StrAppend(&out, "\nhistory:\n");
  for (const dlrm::v1::JobStateChange& change : job.history()) {
    absl::StrAppend(&out, "  ", HistoryLine(change), "\n");
  }
  if (!checkpoints.empty()) {
    absl::StrAppend(&out, "\ncheckpoints (newest last):\n");
    for (const std::string& c : checkpoints) absl::StrAppend(&out, "  ", c, "\n");
  }
  absl::StrAppend(&out, "\nspec:\n");
  for (absl::string_view line : absl::StrSplit(ShortestFloats(job.spec_yaml()), '\n')) {
    if (!line.empty()) absl::StrAppend(&out, "  ", line, "\n");
  }
  return out;
}

std::string MemberLabel(const dlrm::v1::Member& member) {
  return member.name().empty() ? member.member_id() : member.name();
}

std::string JobMessage(const dlrm::v1::Job& job, const ClusterSnapshot* cluster) {
  if (!job.message().empty()) return job.message();
  switch (job.state()) {
    case dlrm::v1::JOB_STATE_PENDING:
      return PendingMessage(job, cluster);
    case dlrm::v1::JOB_STATE_FAILED:
    case dlrm::v1::JOB_STATE_CANCELLED:
      return "no reason recorded";
    default:
      return "";
  }
}

std::string JobDetail(const dlrm::v1::Job& job, bool wide, const ClusterSnapshot* cluster) {
  std::vector<std::vector<std::string>> rows = {
      {"job:", job.job_id()},
      {"name:", job.name()},
      {"state:", StateName(job.state())},
      {"workers:", absl::StrCat(job.requested_workers())},
      {"ps:", job.ps_addresses().empty()
                  ? (job.requested_ps() == 0 ? std::string("all alive at start")
                                             : absl::StrCat(job.requested_ps()))
                  : absl::StrJoin(job.ps_addresses(), ",")},
  };
  if (!job.worker_ids().empty()) rows.push_back({"ranks:", absl::StrJoin(job.worker_ids(), ",")});
  if (wide && !job.ps_member_ids().empty()) {
    rows.push_back({"ps members:", absl::StrJoin(job.ps_member_ids(), ",")});
  }
  if (job.started_ms() > 0) {  // else it never ran: no progress to show
    rows.push_back({"step:", absl::StrCat(job.progress().step())});
    rows.push_back({"samples:", absl::StrCat(job.total_samples())});
    if (wide && !job.rank_samples().empty()) {
      rows.push_back({"rank samples:", absl::StrJoin(job.rank_samples(), ",")});
    }
    rows.push_back({"loss:", absl::StrFormat("%.6f", job.progress().loss())});
  }
  if (job.state() == dlrm::v1::JOB_STATE_SUCCEEDED) {
    const auto& m = job.final_metrics();
    rows.push_back({"auc:", absl::StrFormat("%.6f", m.auc())});
    rows.push_back({"logloss:", absl::StrFormat("%.6f", m.logloss())});
    rows.push_back({"accuracy:", absl::StrFormat("%.6f", m.accuracy())});
    rows.push_back({"samples/s:", absl::StrFormat("%.1f", m.samples_per_sec())});
    rows.push_back({"steps:", absl::StrCat(m.steps())});
  }
  if (job.recoveries() > 0 || job.state() == dlrm::v1::JOB_STATE_RECOVERING) {
    rows.push_back({"recoveries:", absl::StrCat(job.recoveries(), " of ", job.max_recoveries())});
    for (int i = 0; wide && i < job.recovery_history_size(); ++i) {
      const dlrm::v1::JobRecovery& r = job.recovery_history(i);
      rows.push_back(
          {absl::StrCat("recovery ", i + 1, ":"),
           absl::StrCat(
               UtcTime(r.started_ms()), " at step ", r.step_at_loss(), ", ",
               r.resumed_ms() > 0
                   ? absl::StrCat(
                         "running again after ",
                         absl::StrFormat("%.1f s", (r.resumed_ms() - r.started_ms()) / 1000.0))
                   : std::string("not running again"),
               ": ", r.reason())});
    }
  }
  if (wide) {
    rows.push_back({"created:", UtcTime(job.created_ms())});
    rows.push_back({"started:", UtcTime(job.started_ms())});
    rows.push_back({"finished:", UtcTime(job.finished_ms())});
  }
  const std::string message = JobMessage(job, cluster);
  if (!message.empty()) rows.push_back({"message:", message});
  return Columns(rows);
}

std::string JobTable(const std::vector<dlrm::v1::Job>& jobs, bool wide,
                     const ClusterSnapshot* cluster) {
  std::vector<std::vector<std::string>> rows;
  if (wide) {
    rows.push_back({"JOB", "NAME", "STATE", "WORKERS", "PS", "STEP", "SAMPLES", "LOSS", "AUC",
                    "CREATED", "MESSAGE"});
  } else {
    rows.push_back({"JOB", "NAME", "STATE", "WORKERS", "STEP", "SAMPLES", "AUC", "MESSAGE"});
  }
  for (const auto& job : jobs) {
    const std::string message = TableMessage(job, cluster);
    if (wide) {
      rows.push_back({job.job_id(), job.name(), StateName(job.state()),
                      absl::StrCat(job.requested_workers()), PsColumn(job),
                      absl::StrCat(job.progress().step()), absl::StrCat(job.total_samples()),
                      job.state() == dlrm::v1::JOB_STATE_PENDING
                          ? "-"
                          : absl::StrFormat("%.4f", job.progress().loss()),
                      Auc(job), UtcTime(job.created_ms()), message});
    } else {
      rows.push_back({job.job_id(), job.name(), StateName(job.state()),
                      absl::StrCat(job.requested_workers()), absl::StrCat(job.progress().step()),
                      absl::StrCat(job.total_samples()), Auc(job), message});
    }
  }
  return Columns(rows);
}

// The window RunSpeed measures over, and the least span of reports it measures.
constexpr int64_t kSpeedWindowMs = 30'000;
constexpr int64_t kSpeedMinSpanMs = 1'000;

void RunSpeed::Restart() {
  rank_samples_.clear();
  points_.clear();
}

void RunSpeed::Observe(const dlrm::v1::Job& job) {
  if (job.job_id() != job_id_ || job.recoveries() != recoveries_ ||
      job.state() != dlrm::v1::JOB_STATE_RUNNING ||
      static_cast<size_t>(job.rank_samples_size()) != rank_samples_.size()) {
    Restart();
    job_id_ = job.job_id();
    recoveries_ = job.recoveries();
    if (job.state() != dlrm::v1::JOB_STATE_RUNNING) return;
  }
  const int64_t time_ms = job.progress().time_ms();
  if (time_ms <= 0) return;  // no report yet
  if (!points_.empty() && time_ms < points_.back().time_ms) Restart();
  // The step of the newest report, which ranks make at their own times: the furthest one seen.
  const int64_t step = std::max(job.progress().step(), points_.empty() ? 0 : points_.back().step);
  int64_t trained = points_.empty() ? 0 : points_.back().trained;
  if (rank_samples_.empty()) rank_samples_.assign(job.rank_samples_size(), 0);
  for (int r = 0; r < job.rank_samples_size(); ++r) {
    const int64_t now = job.rank_samples(r);
    int64_t& then = rank_samples_[r];
    if (now < then) {  // this rank went back: measure afresh
      Restart();
      Observe(job);
      return;
    }
    // A rank's first report of the run holds what it trained before (a checkpoint's samples):
    // only what it adds after that counts.
    if (then > 0) trained += now - then;
    then = now;
  }
  if (!points_.empty() && time_ms == points_.back().time_ms) {
    points_.back() = {.time_ms = time_ms, .step = step, .trained = trained};
    return;  // no new report (another change of the job), or one more rank at the same time
  }
  points_.push_back({.time_ms = time_ms, .step = step, .trained = trained});
  while (points_.size() > 2 && points_[1].time_ms <= time_ms - kSpeedWindowMs) {
    points_.pop_front();
  }
}

std::optional<double> RunSpeed::Seconds() const {
  if (points_.size() < 2 || points_.back().time_ms - points_.front().time_ms < kSpeedMinSpanMs) {
    return std::nullopt;
  }
  return (points_.back().time_ms - points_.front().time_ms) / 1000.0;
}

std::optional<double> RunSpeed::steps_per_sec() const {
  const std::optional<double> seconds = Seconds();
  if (!seconds.has_value()) return std::nullopt;
  return (points_.back().step - points_.front().step) / *seconds;
}

std::optional<double> RunSpeed::samples_per_sec() const {
  const std::optional<double> seconds = Seconds();
  if (!seconds.has_value()) return std::nullopt;
  return (points_.back().trained - points_.front().trained) / *seconds;
}

std::optional<ProgressFigures> JobProgressMeter::Observe(const dlrm::v1::Job& job) {
  speed_.Observe(job);
  const std::optional<double> samples_per_sec = speed_.samples_per_sec();
  if (job.state() != dlrm::v1::JOB_STATE_RUNNING || !samples_per_sec.has_value()) {
    return std::nullopt;
  }
  const auto& metrics = job.progress().metrics();
  const auto total = metrics.find("total_steps");
  return ProgressFigures{
      .step = job.progress().step(),
      .samples = job.total_samples(),
      .loss = job.progress().loss(),
      .samples_per_sec = *samples_per_sec,
      .total_steps = total == metrics.end() ? -1 : static_cast<int64_t>(total->second)};
}

std::string JobEventLine(const dlrm::v1::Job& job, const ClusterSnapshot* cluster,
                         const RunSpeed* speed) {
  const bool running = job.state() == dlrm::v1::JOB_STATE_RUNNING;
  std::string line = absl::StrCat(job.job_id(), " ", StateName(job.state()));
  if (running || job.state() == dlrm::v1::JOB_STATE_RECOVERING ||
      (IsTerminalJobState(job.state()) && job.started_ms() > 0)) {
    absl::StrAppend(&line, " step ", job.progress().step());
    const auto& metrics = job.progress().metrics();
    const auto total = metrics.find("total_steps");
    if (total != metrics.end() && total->second > 0) {
      const double t = total->second;
      const double step = static_cast<double>(job.progress().step());
      absl::StrAppend(&line, absl::StrFormat("/%.0f (%.0f%%)", t, 100 * std::min(1.0, step / t)));
      const std::optional<double> steps_per_sec =
          speed != nullptr ? speed->steps_per_sec() : std::nullopt;
      if (running && steps_per_sec.has_value() && *steps_per_sec > 0) {
        absl::StrAppend(&line,
                        absl::StrFormat(" ETA %.0fs", std::max(0.0, t - step) / *steps_per_sec));
      }
    }
    absl::StrAppend(&line, " samples ", job.total_samples(),
                    absl::StrFormat(" loss %.4f", job.progress().loss()));
    const std::optional<double> samples_per_sec =
        speed != nullptr ? speed->samples_per_sec() : std::nullopt;
    if (running && samples_per_sec.has_value()) {
      absl::StrAppend(&line, absl::StrFormat(" %.0f samples/s", *samples_per_sec));
    }
  }
  if (job.state() == dlrm::v1::JOB_STATE_SUCCEEDED) {
    const auto& m = job.final_metrics();
    absl::StrAppend(&line,
                    absl::StrFormat(" auc %.4f logloss %.4f accuracy %.4f samples/s %.1f", m.auc(),
                                    m.logloss(), m.accuracy(), m.samples_per_sec()));
  }
  const std::string message = JobMessage(job, cluster);
  if (!message.empty()) absl::StrAppend(&line, " (", message, ")");
  return line;
}

std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms, bool wide) {
  std::vector<std::vector<std::string>> rows = {
      {"MEMBER", "NAME", "ROLE", "STATE", "ADDRESS", "SHARD", "JOB", "RANK", "HEARTBEAT"}};
  if (wide) {
    for (const char* column : {"METRICS", "GPUS", "CORES", "MEMORY", "REGISTERED"}) {
      rows[0].push_back(column);
    }
  }
  for (const auto& m : view.members()) {
    rows.push_back({m.member_id(), OrDash(m.name()), RoleName(m.role()), MemberStateName(m.state()),
                    OrDash(m.address()), m.shard_index() >= 0 ? absl::StrCat(m.shard_index()) : "-",
                    OrDash(m.job_id()), m.rank() >= 0 ? absl::StrCat(m.rank()) : "-",
                    absl::StrFormat("%.1fs ago", (now_ms - m.last_heartbeat_ms()) / 1000.0)});
    if (wide) {
      const auto& c = m.capabilities();
      rows.back().insert(
          rows.back().end(),
          {OrDash(m.metrics_address()), absl::StrCat(c.gpu_count()), absl::StrCat(c.cpu_cores()),
           c.memory_bytes() > 0 ? absl::StrFormat("%.1fGi", c.memory_bytes() / 1073741824.0) : "-",
           UtcTime(m.registered_ms())});
    }
  }
  std::string out = Columns(rows);
  absl::StrAppend(&out, "epoch ", view.epoch(), ", shards: ",
                  view.shard_map().empty() ? "none" : absl::StrJoin(view.shard_map(), ","), "\n");
  return out;
}

}  // namespace dlrm::client
