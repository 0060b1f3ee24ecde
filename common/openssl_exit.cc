#include "common/openssl_exit.h"

#include <openssl/crypto.h>

namespace dlrm::common {

bool InitOpenSslWithoutExitCleanup() {
  // The exit handler is registered once, by the first initialisation: gRPC's later calls (libssl's
  // initialisation runs libcrypto's) find that step done and register nothing.
  return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
}

}  // namespace dlrm::common
