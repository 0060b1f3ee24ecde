// FrequencySketch: approximate access counts for admission and eviction (TinyLFU's count-min
// sketch): 4 rows of 16-bit saturating counters; an estimate is the minimum of a key's 4
// counters, so it never undercounts between resets. After 10 x width increments every counter is
// halved, so old popularity fades and the counts track recent accesses.
//
// Blocked layout (as Caffeine's): a key's 4 counters lie in one 64-byte block of 32 counters,
// one in each quarter of it, so an increment or estimate costs one cache miss instead of four.
// That miss is most of a parameter server's lookup time on a table larger than the caches.
//
// Memory: 4 * width * 2 bytes. Not synchronised: the owner locks.
//
// Growing (as Caffeine's ensureCapacity): a cache sizes its sketch to what it holds, not to what it
// may hold, so that counting the accesses of a small resident set touches little memory; Grow
// re-allocates a wider sketch, all counts reset, as the set grows (counts are only compared once
// the cache is full, when the sketch has its final width).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dlrm::embedding {

class FrequencySketch {
 public:
  // width: counters per row, rounded up to a power of two, at least 64.
  explicit FrequencySketch(int64_t width) { Allocate(width); }

  // Widens the sketch to at least `width` counters per row, resetting every count; a no-op when
  // it is that wide already.
  void Grow(int64_t width) {
    if (width > this->width()) Allocate(width);
  }

  void Increment(int64_t key) {
    const uint64_t h = Hash(key);
    for (int r = 0; r < 4; ++r) {
      uint16_t& c = counters_[Index(h, r)];
      if (c != UINT16_MAX) ++c;
    }
    if (++additions_ >= reset_after_) Halve();
  }

  // Brings the key's block of counters toward the cache ahead of an Increment or Estimate.
  void Prefetch(int64_t key) const { __builtin_prefetch(counters_.data() + BlockStart(Hash(key))); }

  uint32_t Estimate(int64_t key) const {
    const uint64_t h = Hash(key);
    uint32_t best = UINT16_MAX;
    for (int r = 0; r < 4; ++r) best = std::min<uint32_t>(best, counters_[Index(h, r)]);
    return best;
  }

  int64_t width() const { return static_cast<int64_t>(mask_ + 1); }

 private:
  static uint64_t Hash(int64_t key) {
    uint64_t x = static_cast<uint64_t>(key) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  // The block is chosen by the high bits of h; row r's counter is one of the 8 in quarter r of
  // the block, chosen by 3 low bits of h per row.
  static constexpr int kBlockCounters = 32;  // 64 bytes
  // (The block mask is kept precomputed: GCC 12 silently drops a __builtin_prefetch whose
  // address divides by the block size, which left the sketch unprefetched.)
  size_t BlockStart(uint64_t h) const {
    return static_cast<size_t>(((h >> 32) & block_mask_) * kBlockCounters);
  }
  size_t Index(uint64_t h, int r) const {
    const uint64_t within = 8 * static_cast<uint64_t>(r) + ((h >> (3 * r)) & 7);
    return BlockStart(h) + static_cast<size_t>(within);
  }
  void Allocate(int64_t width) {
    int64_t w = 64;
    while (w < width) w <<= 1;
    mask_ = static_cast<uint64_t>(w - 1);
    counters_.assign(static_cast<size_t>(4 * w), 0);  // 4 * w is a multiple of the block size
    block_mask_ = static_cast<uint64_t>(4 * w / kBlockCounters - 1);
    reset_after_ = 10 * w;
    additions_ = 0;
  }
  void Halve() {
    for (uint16_t& c : counters_) c >>= 1;
    additions_ /= 2;
  }

  uint64_t mask_ = 0;
  uint64_t block_mask_ = 0;  // blocks - 1
  std::vector<uint16_t> counters_;
  int64_t additions_ = 0;
  int64_t reset_after_ = 0;
};

}  // namespace dlrm::embedding
