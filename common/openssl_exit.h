// OpenSSL without its clean-up at exit. gRPC 1.51 never stops its threads (executor, timers, event
// engine) before a process's exit handlers run, and OpenSSL's own handler, which frees its global
// state, then races any of those threads still using TLS: a rare SIGSEGV or "double free" as the
// process exits, seen after a failed TLS handshake (grpc/grpc#38539; gRPC 1.83 initialises
// OpenSSL this way itself). Left to the kernel, the memory goes back with the process.
//
// Every dlrm executable calls it at start (openssl_at_start.cc, linked by dlrm_cc_binary).
#pragma once

namespace dlrm::common {

// Initialises OpenSSL with OPENSSL_INIT_NO_ATEXIT. Takes effect only as the process's first
// OpenSSL initialisation (later ones cannot take back the exit handler): call it before anything
// uses TLS. Returns false when OpenSSL refused to initialise.
bool InitOpenSslWithoutExitCleanup();

}  // namespace dlrm::common
