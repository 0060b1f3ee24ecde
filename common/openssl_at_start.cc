// Initialises OpenSSL without its exit-time clean-up before main in every dlrm executable
// (common/openssl_exit.h says why). Linked into each as an object file: a static library's member
// would be dropped since nothing refers to it.
#include "common/openssl_exit.h"

namespace {

[[maybe_unused]] const bool openssl_initialised = dlrm::common::InitOpenSslWithoutExitCleanup();

}  // namespace
