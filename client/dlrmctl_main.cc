// dlrmctl entry point: reads the default coordinator address from the environment (the only
// place that does) and runs the CLI.
#include <cstdlib>
#include <iostream>

#include "client/dlrmctl.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  dlrm::common::SetLogProcessName("dlrmctl");  // the client's few log lines (a watch reconnecting)
  const char* env = std::getenv("DLRM_COORDINATOR");
  const std::string default_coordinator = env != nullptr && *env != '\0' ? env : "127.0.0.1:50051";
  return dlrm::client::RunDlrmctl(argc, argv, default_coordinator, std::cout, std::cerr);
}
