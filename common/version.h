// The version of this build of the service, reported by `dlrmctl version` for the client and,
// through GetClusterViewResponse.server_version, for the coordinator. Equal to project(VERSION)
// in CMakeLists.txt and the Helm chart's appVersion (tests/client checks the first).
#pragma once

namespace dlrm::common {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace dlrm::common
