#include "embedding/embedding_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <limits>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "embedding/row_init.h"
#include "embedding/sparse_optimizer.h"

namespace dlrm::embedding {
namespace {

// Large tables are mapped directly and asked for transparent huge pages: random row accesses
// then miss the TLB far less, and first-touch initialisation takes 512x fewer page faults.
constexpr size_t kHugePage = 2u << 20;

size_t MappedBytes(int64_t floats) {
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  return bytes >= kHugePage ? (bytes + kHugePage - 1) / kHugePage * kHugePage : 0;
}

float* AllocateRows(int64_t floats) {
  const size_t mapped = MappedBytes(floats);
  if (mapped == 0) return new (std::nothrow) float[static_cast<size_t>(floats)];
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, mapped, MADV_HUGEPAGE);  // advisory: ignored where THP is off
  return static_cast<float*>(p);
}

void FreeRows(float* data, int64_t floats) {
  const size_t mapped = MappedBytes(floats);
  if (mapped == 0) {
    delete[] data;
  } else {
    munmap(data, mapped);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(
    const EmbeddingTableOptions& options) {
  const TableConfig& c = options.config;
  const std::string label = TableLabel(options.table_index, c);
  if (c.rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": rows ", c.rows, " must be > 0"));
  }
  if (c.dim <= 0 || c.dim > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": dim ", c.dim, " must be in [1, ", kMaxDim, "]"));
  }
  const int stride = StoredRowFloats(options.optimizer.type, c.dim);
  if (c.rows > std::numeric_limits<int64_t>::max() / 4 / stride) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": rows ", c.rows, " x ", stride, " floats overflows"));
  }
  const int64_t total = c.rows * stride;
  float* data = AllocateRows(total);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(label, ": cannot allocate ", total * 4, " bytes for ", c.rows, " rows"));
  }
  int threads = options.init_threads > 0 ? options.init_threads
                                         : static_cast<int>(std::thread::hardware_concurrency());
  constexpr int64_t kBlock = 1 << 14;  // rows per task
  const int64_t blocks = (c.rows + kBlock - 1) / kBlock;
  common::ParallelForOnce(blocks, std::max(1, threads), [&](int64_t b) {
    const int64_t end = std::min(c.rows, (b + 1) * kBlock);
    for (int64_t id = b * kBlock; id < end; ++id) {
      InitRowWithState(options.table_index, id, options.seed, c.rows, options.optimizer,
                       data + id * stride, c.dim);
    }
  });
  return std::unique_ptr<EmbeddingTable>(new EmbeddingTable(options, data, stride));
}

EmbeddingTable::EmbeddingTable(const EmbeddingTableOptions& options, float* data, int row_stride)
    : options_(options), data_(data), row_stride_(row_stride) {}

EmbeddingTable::~EmbeddingTable() { FreeRows(data_, rows() * row_stride_); }

absl::Status EmbeddingTable::CheckIds(absl::Span<const int64_t> ids) const {
  return CheckIdsInTable(options_.table_index, options_.config, ids);
}

absl::Status EmbeddingTable::Lookup(absl::Span<const int64_t> ids, float* out) const {
  absl::Status status = CheckIds(ids);
  if (!status.ok()) return status;
  LookupUnchecked(ids, out);
  return absl::OkStatus();
}

namespace {

template <int kDim>
void CopyRows(const float* data, int64_t stride, int runtime_dim, absl::Span<const int64_t> ids,
              float* out) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  constexpr size_t kAhead = 8;
  const size_t n = ids.size();
  for (size_t j = 0; j < std::min(n, kAhead); ++j) __builtin_prefetch(data + ids[j] * stride);
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) __builtin_prefetch(data + ids[j + kAhead] * stride);
    const float* src = data + ids[j] * stride;
    float* dst = out + j * dim;
    for (int i = 0; i < dim; ++i) dst[i] = src[i];
  }
}

}  // namespace

void EmbeddingTable::LookupUnchecked(absl::Span<const int64_t> ids, float* out) const {
  switch (dim()) {
    case 16:
      CopyRows<16>(data_, row_stride_, 16, ids, out);
      return;
    case 64:
      CopyRows<64>(data_, row_stride_, 64, ids, out);
      return;
    default:
      CopyRows<0>(data_, row_stride_, dim(), ids, out);
  }
}

absl::Status EmbeddingTable::ApplyGradients(absl::Span<const int64_t> unique_ids,
                                            const float* grads, float learning_rate) {
  absl::Status status = CheckIds(unique_ids);
  if (!status.ok()) return status;
  ApplyGradientsUnchecked(unique_ids, grads, learning_rate);
  return absl::OkStatus();
}

void EmbeddingTable::ApplyGradientsUnchecked(absl::Span<const int64_t> unique_ids,
                                             const float* grads, float learning_rate) {
  const SparseOptimizerOptions optimizer = WithLearningRate(options_.optimizer, learning_rate);
  constexpr size_t kChunk = 256;
  float* rows[kChunk];
  const int d = dim();
  for (size_t start = 0; start < unique_ids.size(); start += kChunk) {
    const size_t count = std::min(kChunk, unique_ids.size() - start);
    for (size_t i = 0; i < count; ++i) {
      rows[i] = data_ + unique_ids[start + i] * row_stride_;
      if (i < 8) __builtin_prefetch(rows[i], 1);
    }
    ApplySparseOptimizerToRows(optimizer, d, rows, grads + start * d, static_cast<int64_t>(count));
  }
}

}  // namespace dlrm::embedding
