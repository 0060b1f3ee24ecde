#include "worker/input/synthetic.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/limits.h"
#include "common/status.h"
#include "worker/input/binary_format.h"
#include "worker/input/feature_hash.h"
#include "worker/input/output_file.h"
#include "worker/input/zipf_sampler.h"

namespace dlrm::worker {
namespace {

constexpr int64_t kKaggleCardinalities[kCriteoNumCategorical] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

double UnitFromHash(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

absl::Status Validate(const GenDataOptions& o) {
  if (o.output.empty()) return absl::InvalidArgumentError("gen-data: no output path");
  if (o.num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("gen-data: num_rows ", o.num_rows, " < 0"));
  }
  if (o.num_rows > common::kMaxGenDataRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("gen-data: num_rows ", o.num_rows, " is over the limit of ",
                     common::kMaxGenDataRows, " (kMaxGenDataRows in common/limits.h)"));
  }
  if (o.cardinalities.size() != kCriteoNumCategorical) {
    return absl::InvalidArgumentError(absl::StrCat("gen-data: expected ", kCriteoNumCategorical,
                                                   " cardinalities, got ", o.cardinalities.size()));
  }
  for (size_t t = 0; t < o.cardinalities.size(); ++t) {
    if (o.cardinalities[t] < 1 || o.cardinalities[t] > (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat("gen-data: table ", t, ": cardinality ",
                                                     o.cardinalities[t], " not in [1, 2^32]"));
    }
  }
  // An infinite exponent never samples (the sampler's rejection loop runs forever).
  if (!(o.zipf_exponent > 0.0) || !std::isfinite(o.zipf_exponent)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gen-data: --zipf ", o.zipf_exponent, " must be a finite number > 0"));
  }
  if (!(o.signal_strength >= 0.0) || !std::isfinite(o.signal_strength)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gen-data: --signal ", o.signal_strength, " must be a finite number >= 0"));
  }
  if (!(o.empty_fraction >= 0.0 && o.empty_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gen-data: --empty-fraction ", o.empty_fraction, " must be in [0, 1)"));
  }
  if (o.bags.has_value() && o.format != InputFormat::kBinary) {
    return absl::InvalidArgumentError(
        "gen-data: multi-hot data needs the binary format (Criteo TSV has one token per field)");
  }
  return absl::OkStatus();
}

// The k-th id (k >= 1) of the bag that one-hot id `id` of table t brings: uniform over the table,
// a fixed function of (seed, t, id, k).
uint32_t BagId(uint64_t seed, int table, int64_t id, int k, int64_t cardinality) {
  const uint64_t key =
      SplitMix64(seed ^ (static_cast<uint64_t>(table) << 56) ^ (static_cast<uint64_t>(k) << 40)) ^
      static_cast<uint64_t>(id);
  return static_cast<uint32_t>(SplitMix64(key) % static_cast<uint64_t>(cardinality));
}

// Appends one record as a Criteo TSV line. `raw_dense[j]` < 0 marks an empty dense field.
void AppendTsvLine(const CriteoRecord& r, const int64_t* raw_dense, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  char line[1024];
  char* p = line;
  *p++ = r.label != 0.0f ? '1' : '0';
  for (int j = 0; j < kCriteoNumDense; ++j) {
    *p++ = '\t';
    if (raw_dense[j] >= 0) p = std::to_chars(p, line + sizeof(line), raw_dense[j]).ptr;
  }
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    *p++ = '\t';
    if (r.missing(t)) continue;
    for (int shift = 28; shift >= 0; shift -= 4) *p++ = kHex[(r.cats[t] >> shift) & 0xf];
  }
  *p++ = '\n';
  out->append(line, p - line);
}

// The least the file takes (binary: exactly; TSV: a label, 39 tabs, a newline and the 8 hex
// digits of each categorical field --empty-fraction leaves filled, dense digits left out) against
// the space free where it goes: 10^12 rows were written until the disk was full,
// and every other writer of that disk failed meanwhile. Not for an output written in place (a
// FIFO, a device), nor where the free space cannot be told.
absl::Status CheckRoomFor(const GenDataOptions& options, bool binary) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(options.output, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) return absl::OkStatus();
  fs::path where =
      fs::exists(status) ? fs::path(options.output) : fs::path(options.output).parent_path();
  if (where.empty()) where = ".";
  struct statvfs fs_stats;
  if (::statvfs(where.c_str(), &fs_stats) != 0) return absl::OkStatus();
  const double free_bytes =
      static_cast<double>(fs_stats.f_bavail) * static_cast<double>(fs_stats.f_frsize);
  double row_bytes = 41 + 8.0 * kCriteoNumCategorical * (1.0 - options.empty_fraction);
  double header_bytes = 0;
  if (binary) {
    const BinaryLayout layout =
        options.bags.has_value() ? BinaryLayout::MultiHot(*options.bags) : BinaryLayout::OneHot();
    row_bytes = static_cast<double>(layout.record_bytes);
    header_bytes = static_cast<double>(layout.header_bytes);
  }
  const double need = header_bytes + row_bytes * static_cast<double>(options.num_rows);
  if (need <= free_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("gen-data --out: ", options.num_rows, " rows need ", binary ? "" : "at least ",
                   absl::StrFormat("%.4g GB (%.0f bytes a row)", need / 1e9, row_bytes),
                   ", over the ", absl::StrFormat("%.4g GB", free_bytes / 1e9),
                   " free on the file system of ", where.string()));
}

}  // namespace

BagSizes MlperfDlrmV2BagSizes() {
  return {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
}

absl::StatusOr<BagSizes> ParseBagSizes(const std::string& text, const std::string& flag) {
  if (text == "mlperf") return MlperfDlrmV2BagSizes();
  const std::string prefix = flag.empty() ? "" : absl::StrCat(flag, ": ");
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.size() != 1 && parts.size() != kCriteoNumCategorical) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "bag sizes '", text, "': give mlperf, one number, or ",
                     kCriteoNumCategorical, " comma-separated numbers (got ", parts.size(), ")"));
  }
  BagSizes bags;
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    const std::string& part = parts[parts.size() == 1 ? 0 : t];
    int size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1 || size > kMaxBagSize) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "bag sizes '", text, "': '", part,
                                                     "' is not a number in [1, ", kMaxBagSize,
                                                     "]"));
    }
    bags[t] = static_cast<uint16_t>(size);
  }
  return bags;
}

std::vector<int64_t> KaggleCardinalities() {
  return std::vector<int64_t>(std::begin(kKaggleCardinalities), std::end(kKaggleCardinalities));
}

std::vector<int64_t> CappedKaggleCardinalities(int64_t max_rows) {
  std::vector<int64_t> rows = KaggleCardinalities();
  for (int64_t& r : rows) r = std::max<int64_t>(1, std::min(r, max_rows));
  return rows;
}

uint32_t ScrambleToken(int table, uint32_t id) {
  // Each step is invertible on uint32 (xor with a constant, odd multiply, xor-shift), so distinct
  // ids of one table always get distinct tokens.
  uint32_t x = id ^ (0x9e3779b9u * static_cast<uint32_t>(table + 1));
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

double SyntheticDenseSigma(int j) { return 0.5 + 0.2 * j; }

PlantedModel::PlantedModel(const GenDataOptions& options)
    : seed_(SplitMix64(options.seed ^ 0x5eed5eed5eed5eedULL)),
      strength_(options.signal_strength),
      bias_(options.bias) {
  for (int j = 0; j < kCriteoNumDense; ++j) {
    const double u = UnitFromHash(SplitMix64(seed_ ^ (0xd0000000ULL + j)));
    dense_weight_[j] = strength_ * 0.3 * (2.0 * u - 1.0);
    // E[log1p(floor(expm1(sigma |z|)))] is a little below E[sigma |z|] = sigma sqrt(2 / pi);
    // centering only has to be roughly right so that `bias` sets the positive rate.
    dense_center_[j] = SyntheticDenseSigma(j) * std::sqrt(2.0 / 3.141592653589793);
  }
}

double PlantedModel::CategoricalWeight(int table, uint32_t token) const {
  const uint64_t key = (static_cast<uint64_t>(table) << 32) | token;
  return strength_ * (2.0 * UnitFromHash(SplitMix64(seed_ ^ SplitMix64(key))) - 1.0);
}

double PlantedModel::Logit(const CriteoRecord& r) const {
  double logit = bias_;
  size_t extra = 0;
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    const size_t more = r.extra_ids.empty() ? 0 : r.bags[t] - 1u;
    if (!r.missing(t)) {
      double sum = CategoricalWeight(t, r.cats[t]);
      for (size_t k = 0; k < more; ++k) sum += CategoricalWeight(t, r.extra_ids[extra + k]);
      logit += sum / static_cast<double>(more + 1);
    }
    extra += more;
  }
  for (int j = 0; j < kCriteoNumDense; ++j) {
    logit += dense_weight_[j] * (r.dense[j] - dense_center_[j]);
  }
  return logit;
}

absl::Status GenerateCriteoTsv(const GenDataOptions& options, GenDataStats* stats) {
  DLRM_RETURN_IF_ERROR(Validate(options));
  DLRM_RETURN_IF_ERROR(CheckOutputPath(options.output, "gen-data --out"));
  const bool binary = options.format == InputFormat::kBinary;
  std::vector<ZipfSampler> samplers;
  samplers.reserve(kCriteoNumCategorical);
  for (int64_t n : options.cardinalities) samplers.emplace_back(n, options.zipf_exponent);
  const PlantedModel model(options);
  Xoshiro256 rng(options.seed);

  DLRM_RETURN_IF_ERROR(CheckRoomFor(options, binary));
  // Both formats go through an OutputFile, as every other file a command writes: a folder is
  // refused before any row is drawn, a symlink's target is replaced (the link stays), and a FIFO
  // or /dev/stdout is written in place (TSV; the binary writer seeks, so it refuses them).
  std::unique_ptr<BinaryWriter> binary_writer;
  std::unique_ptr<OutputFile> tsv_file;
  if (binary) {
    DLRM_ASSIGN_OR_RETURN(binary_writer,
                          BinaryWriter::Create(options.output, options.bags, "gen-data --out"));
  } else {
    DLRM_ASSIGN_OR_RETURN(tsv_file, OutputFile::Open(options.output, "gen-data --out"));
  }

  GenDataStats local;
  std::string out;
  out.reserve(1 << 20);
  CriteoRecord record;
  if (options.bags.has_value()) {
    record.bags = *options.bags;
    record.extra_ids.resize(ExtraIdsPerRecord(record.bags));
  }
  const uint64_t bag_seed = SplitMix64(options.seed ^ 0xba65ba65ba65ba65ULL);
  int64_t raw_dense[kCriteoNumDense];
  for (int64_t row = 0; row < options.num_rows; ++row) {
    record.missing_mask = 0;
    size_t extra = 0;
    for (int t = 0; t < kCriteoNumCategorical; ++t) {
      const int more = options.bags.has_value() ? record.bags[t] - 1 : 0;
      if (rng.NextDouble() < options.empty_fraction) {
        record.cats[t] = 0;
        record.missing_mask |= 1u << t;
        for (int k = 0; k < more; ++k) record.extra_ids[extra + k] = 0;
      } else {
        const int64_t id = samplers[t].Sample(rng) - 1;
        record.cats[t] = ScrambleToken(t, static_cast<uint32_t>(id));
        for (int k = 0; k < more; ++k) {
          const uint32_t bag_id = BagId(bag_seed, t, id, k + 1, options.cardinalities[t]);
          record.extra_ids[extra + k] = ScrambleToken(t, bag_id);
        }
      }
      extra += more;
    }
    for (int j = 0; j < kCriteoNumDense; ++j) {
      if (rng.NextDouble() < options.empty_fraction) {
        raw_dense[j] = -1;
        record.dense[j] = 0.0f;
      } else {
        const double v = std::expm1(SyntheticDenseSigma(j) * std::abs(rng.NextGaussian()));
        raw_dense[j] = static_cast<int64_t>(std::min(v, 1e15));
        record.dense[j] = TransformDense(raw_dense[j]);
      }
    }
    const double p = 1.0 / (1.0 + std::exp(-model.Logit(record)));
    record.label = rng.NextDouble() < p ? 1.0f : 0.0f;
    local.positives += record.label != 0.0f;
    ++local.rows;
    if (binary) {
      DLRM_RETURN_IF_ERROR(binary_writer->Append(record));
    } else {
      AppendTsvLine(record, raw_dense, &out);
      if (out.size() >= (1 << 20) - 1024) {
        DLRM_RETURN_IF_ERROR(tsv_file->Write(out));
        out.clear();
      }
    }
  }
  if (binary) {
    DLRM_RETURN_IF_ERROR(binary_writer->Finish());
  } else {
    DLRM_RETURN_IF_ERROR(tsv_file->Write(out));
    DLRM_RETURN_IF_ERROR(tsv_file->Commit());
  }
  if (stats != nullptr) *stats = local;
  return absl::OkStatus();
}

}  // namespace dlrm::worker
