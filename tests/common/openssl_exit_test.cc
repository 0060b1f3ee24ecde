#include "common/openssl_exit.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace dlrm::common {
namespace {

// Runs among the exit handlers. Registered before OpenSSL's first initialisation, it runs after any
// handler OpenSSL registers (they run in reverse order), so it sees what a gRPC thread would see at
// that point: after OpenSSL's clean-up, OpenSSL refuses to initialise again.
void ExitWithOpenSslsState() {
  std::_Exit(OPENSSL_init_crypto(OPENSSL_INIT_ADD_ALL_DIGESTS, nullptr) == 1 ? 0 : 3);
}

// A fresh process (the death test re-runs this binary for this test alone), as at a dlrm
// executable's start.
TEST(OpenSslExitDeathTest, OpenSslIsStillUsableWhenTheExitHandlersHaveRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::atexit(ExitWithOpenSslsState);
        if (!InitOpenSslWithoutExitCleanup()) std::_Exit(4);
        // Use it as a TLS handshake does, then leave main's way.
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int size = 0;
        if (EVP_Digest("x", 1, digest, &size, EVP_sha256(), nullptr) != 1) std::_Exit(5);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dlrm::common
