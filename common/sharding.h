// Which parameter-server shard owns an embedding row. Shared by the coordinator (shard map),
// the parameter servers (to validate what they are sent) and the workers' sharded client, so
// all sides agree. Pure functions, thread-safe.
#pragma once

#include <cstdint>

namespace dlrm::common {

// The splitmix64 finalizer: a cheap bijective mix with good avalanche, so consecutive ids and
// the low tables spread evenly over shards.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Shard of row `id` of table `table` among `shard_count` shards, in [0, shard_count).
// REQUIRES: shard_count >= 1.
inline int ShardOf(int table, int64_t id, int shard_count) {
  const uint64_t h =
      Mix64(Mix64(static_cast<uint64_t>(id)) ^
            (static_cast<uint64_t>(static_cast<uint32_t>(table)) * 0x9e3779b97f4a7c15ULL));
  return static_cast<int>(h % static_cast<uint64_t>(shard_count));
}

}  // namespace dlrm::common
