// Small valid and invalid job specs shared by the server and client tests.
#pragma once

namespace dlrm::testing {

inline constexpr char kTinySpec[] = R"(name: tiny
model:
  dense_features: 13
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  embedding_dim: 4
tables:
  cardinalities: [10, 20]
)";

// model.bottom_mlp's last width does not match embedding_dim.
inline constexpr char kBadSpec[] = R"(name: bad
model:
  dense_features: 13
  bottom_mlp: [8, 32]
  top_mlp: [8, 1]
  embedding_dim: 4
tables:
  cardinalities: [10, 20]
)";

}  // namespace dlrm::testing
