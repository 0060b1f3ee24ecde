// Which parameter-server shard owns an embedding row. Shared by the parameter servers (to
// validate what they are sent) and the workers' sharded client, so both sides agree (the
// coordinator only orders a job's servers: shard i is the i-th). Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "common/mix64.h"

namespace dlrm::common {

// Shard of row `id` of table `table` among `shard_count` shards, in [0, shard_count); Mix64
// spreads consecutive ids and the low tables evenly over the shards.
// REQUIRES: shard_count >= 1.
inline int ShardOf(int table, int64_t id, int shard_count) {
  const uint64_t h =
      Mix64(Mix64(static_cast<uint64_t>(id)) ^
            (static_cast<uint64_t>(static_cast<uint32_t>(table)) * 0x9e3779b97f4a7c15ULL));
  return static_cast<int>(h % static_cast<uint64_t>(shard_count));
}

}  // namespace dlrm::common
