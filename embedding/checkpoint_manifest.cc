#include "embedding/checkpoint_manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status.h"
#include "embedding/checkpoint_io.h"
#include "nlohmann/json.hpp"

namespace dlrm::embedding {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kDirPrefix[] = "ckpt-";

json ToJson(const CheckpointManifest& m) {
  json files = json::array();
  for (const CheckpointFileEntry& f : m.files) {
    json e = {{"name", f.name},
              {"kind", f.kind},
              {"bytes", f.bytes},
              {"crc32c", absl::StrFormat("%08x", f.crc32c)}};
    if (f.kind != "dense") {
      e["table"] = f.table;
      e["part"] = f.part;
      e["rows"] = f.rows;
    }
    files.push_back(e);
  }
  json ranks = json::array();
  for (const RankPosition& r : m.ranks) {
    ranks.push_back(
        {{"rank", r.rank}, {"epoch", r.epoch}, {"batches", r.batches}, {"samples", r.samples}});
  }
  json tables = json::array();
  for (const TableShape& t : m.tables) {
    tables.push_back(
        {{"name", t.name}, {"rows", t.rows}, {"dim", t.dim}, {"row_floats", t.row_floats}});
  }
  return {{"format", "dlrm-checkpoint"},
          {"version", m.version},
          {"name", m.name},
          {"job", {{"name", m.job_name}, {"id", m.job_id}, {"spec", m.spec_yaml}}},
          {"step", m.step},
          {"samples", m.samples},
          {"created_unix", m.created_unix},
          {"incremental", m.incremental},
          {"parent", m.parent},
          {"parent_created_unix", m.parent_created_unix},
          {"rng", {{"seed", m.seed}}},
          {"input", {{"world_size", m.world_size}, {"ranks", ranks}}},
          {"model",
           {{"tables", tables},
            {"dense_params", m.dense_params},
            {"dense_optimizer", m.dense_optimizer},
            {"sparse_optimizer", m.sparse_optimizer}}},
          {"files", files}};
}

absl::StatusOr<CheckpointManifest> FromJson(const json& j) {
  CheckpointManifest m;
  if (j.value("format", "") != "dlrm-checkpoint") return absl::DataLossError("not a manifest");
  m.version = j.at("version").get<int>();
  if (m.version != kCheckpointFormatVersion) {
    return absl::DataLossError(absl::StrCat("format version ", m.version, "; this build reads ",
                                            kCheckpointFormatVersion));
  }
  m.name = j.at("name").get<std::string>();
  // Names are joined to the checkpoint root to find, keep and remove folders: never a path.
  if (!IsCheckpointDirName(m.name)) {
    return absl::DataLossError(absl::StrCat("name '", m.name, "' is not a checkpoint's name"));
  }
  m.job_name = j.at("job").at("name").get<std::string>();
  m.job_id = j.at("job").at("id").get<std::string>();
  m.spec_yaml = j.at("job").at("spec").get<std::string>();
  m.step = j.at("step").get<int64_t>();
  m.samples = j.at("samples").get<int64_t>();
  m.created_unix = j.at("created_unix").get<double>();
  m.incremental = j.at("incremental").get<bool>();
  m.parent = j.at("parent").get<std::string>();
  m.parent_created_unix = j.value("parent_created_unix", 0.0);
  m.seed = j.at("rng").at("seed").get<uint64_t>();
  m.world_size = j.at("input").at("world_size").get<int>();
  for (const json& r : j.at("input").at("ranks")) {
    m.ranks.push_back({.rank = r.at("rank").get<int>(),
                       .epoch = r.at("epoch").get<int64_t>(),
                       .batches = r.at("batches").get<int64_t>(),
                       .samples = r.at("samples").get<int64_t>()});
  }
  const json& model = j.at("model");
  for (const json& t : model.at("tables")) {
    m.tables.push_back({.name = t.at("name").get<std::string>(),
                        .rows = t.at("rows").get<int64_t>(),
                        .dim = t.at("dim").get<int>(),
                        .row_floats = t.at("row_floats").get<int>()});
  }
  m.dense_params = model.at("dense_params").get<int64_t>();
  m.dense_optimizer = model.at("dense_optimizer").get<std::string>();
  m.sparse_optimizer = model.at("sparse_optimizer").get<std::string>();
  for (const json& f : j.at("files")) {
    CheckpointFileEntry e;
    e.name = f.at("name").get<std::string>();
    e.kind = f.at("kind").get<std::string>();
    e.bytes = f.at("bytes").get<int64_t>();
    e.crc32c = static_cast<uint32_t>(std::stoul(f.at("crc32c").get<std::string>(), nullptr, 16));
    if (e.kind != "dense") {
      e.table = f.at("table").get<int>();
      e.part = f.at("part").get<int>();
      e.rows = f.at("rows").get<int64_t>();
    }
    // A name is a plain file in the checkpoint directory, never a path out of it.
    if (e.name.empty() || absl::StrContains(e.name, "/") || e.name == "." || e.name == "..") {
      return absl::DataLossError(absl::StrCat("file name '", e.name, "' is not a plain name"));
    }
    m.files.push_back(std::move(e));
  }
  // Counts that nothing writes negative, nor a world without ranks: an edited manifest's values
  // would become resume positions, seek offsets and allocation sizes.
  for (const auto& [what, value] : {std::pair<const char*, int64_t>{"step", m.step},
                                    {"samples", m.samples},
                                    {"model.dense_params", m.dense_params}}) {
    if (value < 0) return absl::DataLossError(absl::StrCat(what, " ", value, " is negative"));
  }
  // The name is made from the step: an edited step would resume and report another position.
  if (m.name != CheckpointDirName(m.step)) {
    return absl::DataLossError(
        absl::StrCat("step ", m.step, " is not that of its name '", m.name, "'"));
  }
  if (m.world_size < 1) {
    return absl::DataLossError(absl::StrCat("input.world_size ", m.world_size, " is not >= 1"));
  }
  for (const RankPosition& r : m.ranks) {
    if (r.rank < 0 || r.rank >= m.world_size || r.epoch < 0 || r.batches < 0 || r.samples < 0) {
      return absl::DataLossError(absl::StrCat("input rank ", r.rank, " (epoch ", r.epoch,
                                              ", batches ", r.batches, ", samples ", r.samples,
                                              ") is out of range for world_size ", m.world_size));
    }
  }
  for (const TableShape& t : m.tables) {
    if (t.rows < 0 || t.dim < 1 || t.row_floats < t.dim) {
      return absl::DataLossError(absl::StrCat("table '", t.name, "': rows ", t.rows, ", dim ",
                                              t.dim, ", row_floats ", t.row_floats,
                                              " out of range"));
    }
  }
  for (const CheckpointFileEntry& f : m.files) {
    const bool rows = f.kind == "rows" || f.kind == "hot_rows";
    if (f.bytes < 0 || f.rows < 0 || f.part < 0 || (rows && f.table < 0)) {
      return absl::DataLossError(absl::StrCat("file '", f.name, "': bytes ", f.bytes, ", rows ",
                                              f.rows, ", table ", f.table, ", part ", f.part,
                                              " out of range"));
    }
  }
  return m;
}

// The manifest's own checksum: CRC32C of its compact JSON (keys sorted, as nlohmann::json keeps
// them) without this key, so the text read back can be checked after re-serialising it.
constexpr char kManifestCrcKey[] = "manifest_crc32c";

std::string ManifestCrc(const json& without_crc) {
  const std::string compact = without_crc.dump();
  return absl::StrFormat("%08x", Crc32c(compact.data(), compact.size()));
}

}  // namespace

bool IsCheckpointDirName(absl::string_view name) {
  // CheckpointDirName's form: the prefix and at least 12 digits, nothing else. `ckpt-run1` (a
  // user's folder of another run) is not one: folder scans neither load nor remove it.
  if (!absl::ConsumePrefix(&name, kDirPrefix) || name.size() < 12) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t CheckpointManifest::total_bytes() const {
  int64_t total = 0;
  for (const CheckpointFileEntry& f : files) total += f.bytes;
  return total;
}

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("%s%012d", kDirPrefix, step); }

std::string RowFileName(int table, int part) {
  return absl::StrCat("rows-t", table, "-p", part, ".bin");
}

absl::Status CommitManifest(const std::string& dir, const CheckpointManifest& manifest) {
  json j = ToJson(manifest);
  j[kManifestCrcKey] = ManifestCrc(j);
  const std::string text = j.dump(2) + "\n";
  const std::string tmp = absl::StrCat(dir, "/", kManifestName, ".tmp");
  DLRM_ASSIGN_OR_RETURN(auto out, ChecksummedWriter::Create(tmp));
  DLRM_RETURN_IF_ERROR(out->Append(text.data(), text.size()));
  DLRM_RETURN_IF_ERROR(out->Close().status());
  std::error_code ec;
  fs::rename(tmp, absl::StrCat(dir, "/", kManifestName), ec);
  if (ec) return FileError(ec, absl::StrCat(tmp, ": rename"));
  DLRM_RETURN_IF_ERROR(SyncDirectory(dir));
  const std::string parent = fs::path(dir).parent_path().string();
  return SyncDirectory(parent.empty() ? "." : parent);
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kManifestName);
  // Only a manifest that is not there makes an uncommitted checkpoint (which a run removes): one
  // that cannot be read is an error, and one that is no regular file (a FIFO, a link to a
  // device) or past any manifest's size is damaged, refused before it is read.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": no committed checkpoint (no ", kManifestName, ")"));
    }
    return FileError(errno, path);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, ": damaged manifest: not a regular file"));
  }
  if (st.st_size > common::kMaxManifestBytes) {
    return absl::DataLossError(absl::StrCat(path, ": damaged manifest: ", st.st_size,
                                            " bytes, over the limit of ", common::kMaxManifestBytes,
                                            " (kMaxManifestBytes in common/limits.h)"));
  }
  std::ifstream in(path);
  if (!in) return FileError(errno, path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    // Manifests written before the checksum have none; every one written since is checked.
    if (j.is_object() && j.contains(kManifestCrcKey)) {
      const std::string stored = j[kManifestCrcKey].get<std::string>();
      j.erase(kManifestCrcKey);
      if (const std::string computed = ManifestCrc(j); computed != stored) {
        return absl::DataLossError(absl::StrCat(
            path, ": damaged manifest: its content gives CRC32C ", computed, ", not the ", stored,
            " written with it (", kManifestCrcKey, "): changed after it was committed"));
      }
    }
    absl::StatusOr<CheckpointManifest> m = FromJson(j);
    if (!m.ok()) return absl::DataLossError(absl::StrCat(path, ": ", m.status().message()));
    return m;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": damaged manifest: ", e.what()));
  }
}

absl::Status VerifyCheckpointFiles(const std::string& dir, const CheckpointManifest& manifest) {
  for (const CheckpointFileEntry& f : manifest.files) {
    DLRM_RETURN_IF_ERROR(
        VerifyFile(absl::StrCat(dir, "/", f.name), {.bytes = f.bytes, .crc32c = f.crc32c}));
  }
  return absl::OkStatus();
}

std::string NormalizeCheckpointPath(const std::string& path) {
  auto strip = [](fs::path p) {
    p = p.lexically_normal();
    // "a/b/" names a/b: its filename is empty.
    if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
    return p;
  };
  fs::path p = strip(fs::path(path));
  const std::string name = p.filename().string();
  if (!p.has_parent_path() || name == "." || name == "..") {
    std::error_code ec;
    const fs::path absolute = fs::absolute(p, ec);
    if (!ec) p = strip(absolute);
  }
  return p.string();
}

absl::StatusOr<std::vector<CheckpointManifest>> ListCheckpoints(
    const std::string& root, std::vector<absl::Status>* damaged) {
  std::vector<CheckpointManifest> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (!IsCheckpointDirName(e.path().filename().string())) continue;
    std::error_code entry_ec;
    if (!e.is_directory(entry_ec)) {
      // A checkpoint's name that cannot be looked at (a link in a loop, no permission) is named
      // with the damaged ones rather than passed over in silence.
      if (entry_ec && damaged != nullptr)
        damaged->push_back(FileError(entry_ec, e.path().string()));
      continue;
    }
    absl::StatusOr<CheckpointManifest> m = ReadManifest(e.path().string());
    if (m.status().code() == absl::StatusCode::kNotFound) continue;  // not committed
    if (!m.ok()) {
      if (damaged != nullptr) damaged->push_back(m.status());
      continue;
    }
    // A folder found under the root is known by its own name, not by what its manifest says
    // (a copy renamed to another step's name).
    m->name = e.path().filename().string();
    out.push_back(std::move(*m));
  }
  if (ec) return FileError(ec, root);
  std::sort(out.begin(), out.end(), [](const CheckpointManifest& a, const CheckpointManifest& b) {
    return a.step < b.step;
  });
  return out;
}

absl::StatusOr<std::vector<CheckpointManifest>> LoadChain(const std::string& checkpoint,
                                                          bool verify_files) {
  const std::string dir = NormalizeCheckpointPath(checkpoint);
  std::vector<CheckpointManifest> chain;
  const fs::path root = fs::path(dir).parent_path();
  std::string current = dir;
  std::set<std::string> seen;
  double expected_created = 0;  // the parent's created_unix its child recorded
  while (true) {
    DLRM_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(current));
    if (verify_files) DLRM_RETURN_IF_ERROR(VerifyCheckpointFiles(current, m));
    if (expected_created > 0 && m.created_unix != expected_created) {
      // Another run wrote a checkpoint of this name (its step) after the child's parent was
      // lost: the child's changed rows on top of it would be a model of neither run.
      return absl::DataLossError(absl::StrCat(
          dir, " builds on ", current, " as written at ", absl::StrFormat("%.6f", expected_created),
          "; the one there now was written at ", absl::StrFormat("%.6f", m.created_unix),
          " (another run's)"));
    }
    const bool incremental = m.incremental;
    const std::string parent = m.parent;
    expected_created = m.parent_created_unix;
    chain.push_back(std::move(m));
    if (!incremental) break;
    if (parent.empty() || !IsCheckpointDirName(parent) || !seen.insert(parent).second) {
      return absl::DataLossError(
          absl::StrCat(current, ": incremental checkpoint with a bad parent '", parent, "'"));
    }
    current = (root / parent).string();
    std::error_code ec;
    if (!fs::exists(current, ec)) {
      if (ec) return FileError(ec, absl::StrCat(dir, " builds on ", current));
      return absl::NotFoundError(absl::StrCat(dir, " builds on ", current, ", which is gone"));
    }
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

absl::StatusOr<VerifiedCheckpoint> FindVerifiedCheckpoint(const std::string& path,
                                                          absl::string_view job_id) {
  VerifiedCheckpoint out;
  const std::string normal = NormalizeCheckpointPath(path);
  std::error_code ec;
  if (fs::exists(fs::path(normal) / kManifestName, ec)) {
    out.dir = normal;
    DLRM_ASSIGN_OR_RETURN(out.chain, LoadChain(normal));
    return out;
  }
  std::vector<absl::Status> damaged;
  DLRM_ASSIGN_OR_RETURN(std::vector<CheckpointManifest> all, ListCheckpoints(normal, &damaged));
  absl::Status last_error;
  for (const absl::Status& d : damaged) {
    DLRM_LOG(ERROR) << "checkpoint refused: " << d.message();
    last_error = d;
  }
  if (!job_id.empty()) {
    std::erase_if(all, [job_id](const CheckpointManifest& m) { return m.job_id != job_id; });
    if (all.empty()) {
      return absl::NotFoundError(
          absl::StrCat(path, " holds no committed checkpoint of job ", job_id));
    }
  }
  if (all.empty() && damaged.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, fs::exists(normal, ec)
                               ? ": neither a checkpoint nor a folder holding committed checkpoints"
                               : ": no such file or folder"));
  }
  // The newest whose whole chain verifies; damaged ones are named.
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string candidate = (fs::path(normal) / it->name).string();
    absl::StatusOr<std::vector<CheckpointManifest>> loaded = LoadChain(candidate);
    if (loaded.ok()) {
      out.dir = candidate;
      out.chain = std::move(*loaded);
      return out;
    }
    DLRM_LOG(ERROR) << "checkpoint " << candidate << " refused: " << loaded.status().message();
    last_error = loaded.status();
  }
  return last_error;
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  DLRM_ASSIGN_OR_RETURN(VerifiedCheckpoint c, FindVerifiedCheckpoint(path));
  return c.dir;
}

absl::StatusOr<int> RemoveUncommitted(const std::string& root) {
  int removed = 0;
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  std::vector<fs::path> doomed;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!IsCheckpointDirName(name)) continue;
    // Uncommitted only when its manifest is certainly missing: a folder or manifest that cannot
    // be looked at (no permission, a link in a loop) stays.
    std::error_code entry_ec;
    if (!e.is_directory(entry_ec) || entry_ec) continue;
    if (ReadManifest(e.path().string()).status().code() == absl::StatusCode::kNotFound) {
      doomed.push_back(e.path());
    }
  }
  for (const fs::path& p : doomed) {
    fs::remove_all(p, ec);
    if (ec) return FileError(ec, p.string());
    ++removed;
  }
  return removed;
}

absl::StatusOr<int> ApplyRetention(const std::string& root, int keep_last) {
  DLRM_ASSIGN_OR_RETURN(std::vector<CheckpointManifest> all, ListCheckpoints(root));
  if (keep_last < 1) keep_last = 1;
  std::set<std::string> keep;
  for (size_t i = all.size() > static_cast<size_t>(keep_last) ? all.size() - keep_last : 0;
       i < all.size(); ++i) {
    // A kept checkpoint keeps its whole chain.
    const CheckpointManifest* m = &all[i];
    while (m != nullptr && keep.insert(m->name).second && m->incremental) {
      const std::string parent = m->parent;
      m = nullptr;
      for (const CheckpointManifest& c : all) {
        if (c.name == parent) m = &c;
      }
    }
  }
  int removed = 0;
  for (const CheckpointManifest& m : all) {
    if (keep.contains(m.name)) continue;
    std::error_code ec;
    // The manifest goes first: a crash halfway leaves an uncommitted directory, not a broken one.
    fs::remove(fs::path(root) / m.name / kManifestName, ec);
    fs::remove_all(fs::path(root) / m.name, ec);
    if (ec) {
      return FileError(ec,
                       absl::StrCat("removing the checkpoint ", (fs::path(root) / m.name).string(),
                                    " past checkpoint.keep_last ", keep_last));
    }
    ++removed;
  }
  return removed;
}

}  // namespace dlrm::embedding
