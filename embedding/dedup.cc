#include "embedding/dedup.h"

#include "absl/container/flat_hash_map.h"

namespace dlrm::embedding {

void Deduplicate(absl::Span<const int64_t> ids, std::vector<int64_t>* unique,
                 std::vector<int64_t>* inverse) {
  unique->clear();
  inverse->resize(ids.size());
  absl::flat_hash_map<int64_t, int64_t> position;
  position.reserve(ids.size());
  unique->reserve(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    auto [it, inserted] = position.try_emplace(ids[j], static_cast<int64_t>(unique->size()));
    if (inserted) unique->push_back(ids[j]);
    (*inverse)[j] = it->second;
  }
}

namespace {

// Set bits of x, inline: without -mpopcnt the compiler calls a library routine instead, once per
// id of the batch.
inline int PopCount(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
}

// inverse[j] = the position of ids[j] among the set bits: the set bits below it. kPopcnt: the
// CPU's POPCNT instruction (one instruction where PopCount takes a dozen).
template <bool kPopcnt>
inline void BitmapInverse(const int64_t* ids, size_t n, const uint64_t* bits, const int32_t* rank,
                          int64_t* inverse) {
  for (size_t j = 0; j < n; ++j) {
    const int64_t id = ids[j];
    const uint64_t below = bits[id >> 6] & ((uint64_t{1} << (id & 63)) - 1);
    if constexpr (kPopcnt) {
      inverse[j] = rank[id >> 6] + __builtin_popcountll(below);
    } else {
      inverse[j] = rank[id >> 6] + PopCount(below);
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("popcnt"))) void BitmapInversePopcnt(const int64_t* ids, size_t n,
                                                           const uint64_t* bits,
                                                           const int32_t* rank, int64_t* inverse) {
  BitmapInverse<true>(ids, n, bits, rank, inverse);
}

bool CpuHasPopcnt() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("popcnt") != 0;
  }();
  return has;
}
#endif

}  // namespace

size_t Deduplicator::Slot(int64_t id) const {
  // Fibonacci hashing: the product's high bits mix every bit of the id, so strided ids spread.
  return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift_);
}

void Deduplicator::Resize(size_t capacity, const std::vector<int64_t>& unique) {
  keys_.assign(capacity, kEmpty);
  index_.resize(capacity);
  shift_ = 64 - __builtin_ctzll(capacity);
  used_.clear();
  const size_t mask = capacity - 1;
  for (size_t u = 0; u < unique.size(); ++u) {
    if (unique[u] == kEmpty) continue;
    size_t s = Slot(unique[u]);
    while (keys_[s] != kEmpty) s = (s + 1) & mask;
    keys_[s] = unique[u];
    index_[s] = static_cast<int32_t>(u);
    used_.push_back(static_cast<uint32_t>(s));
  }
}

void Deduplicator::Run(absl::Span<const int64_t> ids, int64_t num_rows,
                       std::vector<int64_t>* unique, std::vector<int64_t>* inverse) {
  if (num_rows > 0 && num_rows <= kBitmapRowsPerId * static_cast<int64_t>(ids.size()) &&
      RunBitmap(ids, num_rows, unique, inverse)) {
    return;
  }
  RunHash(ids, unique, inverse);
}

bool Deduplicator::RunBitmap(absl::Span<const int64_t> ids, int64_t num_rows,
                             std::vector<int64_t>* unique, std::vector<int64_t>* inverse) {
  const size_t words = static_cast<size_t>((num_rows + 63) / 64);
  bits_.assign(words, 0);
  for (int64_t id : ids) {
    if (id < 0 || id >= num_rows) return false;  // unique and inverse not yet written
    bits_[id >> 6] |= uint64_t{1} << (id & 63);
  }
  rank_.resize(words);
  int32_t rank = 0;
  for (size_t w = 0; w < words; ++w) {
    rank_[w] = rank;
    rank += PopCount(bits_[w]);
  }
  // The distinct ids in ascending order, written by position (no push_back per id).
  unique->resize(static_cast<size_t>(rank));
  int64_t* out = unique->data();
  for (size_t w = 0; w < words; ++w) {
    for (uint64_t x = bits_[w]; x != 0; x &= x - 1) {
      *out++ = static_cast<int64_t>(w * 64 + __builtin_ctzll(x));
    }
  }
  // An id's position in unique: the set bits below it.
  inverse->resize(ids.size());
#if defined(__x86_64__)
  if (CpuHasPopcnt()) {
    BitmapInversePopcnt(ids.data(), ids.size(), bits_.data(), rank_.data(), inverse->data());
    return true;
  }
#endif
  BitmapInverse<false>(ids.data(), ids.size(), bits_.data(), rank_.data(), inverse->data());
  return true;
}

void Deduplicator::RunHash(absl::Span<const int64_t> ids, std::vector<int64_t>* unique,
                           std::vector<int64_t>* inverse) {
  unique->clear();
  inverse->resize(ids.size());
  if (keys_.empty()) Resize(1024, *unique);
  int64_t empty_id_index = -1;
  size_t mask = keys_.size() - 1;
  for (size_t j = 0; j < ids.size(); ++j) {
    const int64_t id = ids[j];
    if (id == kEmpty) {
      if (empty_id_index < 0) {
        empty_id_index = static_cast<int64_t>(unique->size());
        unique->push_back(id);
      }
      (*inverse)[j] = empty_id_index;
      continue;
    }
    size_t s = Slot(id);
    while (keys_[s] != id && keys_[s] != kEmpty) s = (s + 1) & mask;
    if (keys_[s] == id) {
      (*inverse)[j] = index_[s];
      continue;
    }
    const int64_t u = static_cast<int64_t>(unique->size());
    keys_[s] = id;
    index_[s] = static_cast<int32_t>(u);
    used_.push_back(static_cast<uint32_t>(s));
    unique->push_back(id);
    (*inverse)[j] = u;
    // At most half full: probe sequences stay short.
    if (2 * used_.size() > keys_.size()) {
      Resize(2 * keys_.size(), *unique);
      mask = keys_.size() - 1;
    }
  }
  for (uint32_t s : used_) keys_[s] = kEmpty;
  used_.clear();
}

}  // namespace dlrm::embedding
