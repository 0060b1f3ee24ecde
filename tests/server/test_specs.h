// Small valid and invalid job specs shared by the server and client tests. Both have Criteo's
// shape (13 dense features, 26 tables): the coordinator refuses any other at SubmitJob.
#pragma once

namespace dlrm::testing {

inline constexpr char kTinySpec[] = R"(name: tiny
model:
  dense_features: 13
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  embedding_dim: 4
tables:
  cardinalities: [10, 20, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
                  10, 10, 10, 10, 10, 10]
)";

// model.bottom_mlp's last width does not match embedding_dim.
inline constexpr char kBadSpec[] = R"(name: bad
model:
  dense_features: 13
  bottom_mlp: [8, 32]
  top_mlp: [8, 1]
  embedding_dim: 4
tables:
  cardinalities: [10, 20, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
                  10, 10, 10, 10, 10, 10]
)";

}  // namespace dlrm::testing
