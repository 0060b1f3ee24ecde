#include "client/tls_flags.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::client {
namespace {

// The certificate and the key must be one pair. Swapped files (`--tls-cert tls.key --tls-key
// tls.crt`), or another identity's key, passed the PEM check: a server then failed with "cannot
// listen on ... (address in use?)", and a worker or parameter server retried for a minute saying
// nothing. `cert_from` and `key_from` name the flag (or the file of --tls-dir) each came from.
absl::Status CheckCertificateAndKey(const std::string& cert_path, const std::string& cert_from,
                                    const std::string& key_path, const std::string& key_from) {
  auto open = [](const std::string& path) {
    return std::unique_ptr<BIO, decltype(&BIO_free)>(BIO_new_file(path.c_str(), "r"), &BIO_free);
  };
  auto cert_bio = open(cert_path);
  auto key_bio = open(key_path);
  if (cert_bio == nullptr || key_bio == nullptr) return absl::OkStatus();  // read before: gone?
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), &X509_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  const bool matches =
      cert != nullptr && key != nullptr && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();  // OpenSSL's queue is per thread; gRPC reads it later on this one
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS certificate (", cert_from, "): '", cert_path,
                     "' holds no certificate (are the certificate and the key swapped?)"));
  }
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS key (", key_from, "): '", key_path,
                     "' holds no private key (are the certificate and the key swapped?)"));
  }
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat("TLS key (", key_from, "): '", key_path,
                                                   "' is not the key of the certificate '",
                                                   cert_path, "' (", cert_from, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

void AddTlsFlags(CLI::App* cmd, TlsFlags* flags) {
  cmd->add_option("--tls-dir", flags->dir,
                  "Folder with tls.crt, tls.key and ca.crt (mutual TLS; env DLRM_TLS_DIR)");
  cmd->add_option("--tls-cert", flags->cert, "This process's certificate (PEM)");
  cmd->add_option("--tls-key", flags->key, "This process's private key (PEM)");
  cmd->add_option("--tls-ca", flags->ca, "CA certificate that signs every peer (PEM)");
  cmd->add_option("--tls-server-name", flags->server_name,
                  "Name the servers' certificates carry, when not the host dialled");
  cmd->add_flag("--insecure", flags->insecure,
                "Plaintext gRPC, also on non-loopback addresses (no TLS, no peer check)");
}

absl::StatusOr<std::string> ReadClientToken(const std::string& path) {
  if (path.empty()) {
    const char* env = getenv("DLRM_TOKEN");
    return env == nullptr ? std::string() : std::string(absl::StripAsciiWhitespace(env));
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--token-file: cannot read '", path, "'"));
  std::string line;
  std::getline(in, line);
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file '", path, "' has no token"));
  }
  return token;
}

bool IsLoopbackAddress(const std::string& address) {
  std::string host = address;
  if (absl::StartsWith(host, "[")) {  // [::1]:port
    host = host.substr(1, host.find(']') == std::string::npos ? host.npos : host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  if (host == "localhost") return true;
  // Only an address literal: a name such as "127.example.com" may resolve anywhere.
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

absl::StatusOr<common::TransportSecurity> ResolveTls(const TlsFlags& flags,
                                                     const std::string& listen_address,
                                                     const std::string& who) {
  common::TransportSecurity security;
  const bool files = !flags.cert.empty() || !flags.key.empty() || !flags.ca.empty();
  std::string dir = flags.dir;
  std::string dir_source = "--tls-dir";  // what the user gave: named in errors
  if (dir.empty() && !files) {
    const char* env = getenv("DLRM_TLS_DIR");
    if (env != nullptr) dir = env;
    dir_source = "$DLRM_TLS_DIR";
  }
  if (!dir.empty() && files) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": give --tls-dir or --tls-cert/--tls-key/--tls-ca, not both"));
  }
  if (!dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return absl::NotFoundError(absl::StrCat(who, ": ", dir_source, " '", dir,
                                              "' is not a folder (it should hold tls.crt, tls.key "
                                              "and ca.crt, as `dlrm certs` writes them)"));
    }
    security = common::TransportSecurity::FromDir(dir);
  } else if (files && !flags.token.empty() && flags.cert.empty() && flags.key.empty()) {
    // A client with a token: the CA to check the server, no certificate of its own.
    security.mode = common::TransportSecurity::Mode::kTls;
    security.root_certs_path = flags.ca;
  } else if (files) {
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string&>{"--tls-cert", flags.cert},
          {"--tls-key", flags.key},
          {"--tls-ca", flags.ca}}) {
      if (value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, ": ", flag, " is missing (TLS needs --tls-cert, --tls-key and --tls-ca)"));
      }
    }
    security.mode = common::TransportSecurity::Mode::kTls;
    security.cert_chain_path = flags.cert;
    security.private_key_path = flags.key;
    security.root_certs_path = flags.ca;
  }
  if (security.tls()) {
    if (flags.insecure) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": --insecure together with TLS certificates; choose one"));
    }
    security.server_name = flags.server_name;
    security.bearer_token = flags.token;
    // Each file is named by the flag the user gave: their --tls-dir, not a --tls-ca never given.
    auto check = [&](const std::string& path, const char* what, const char* flag,
                     const char* file) {
      const std::string from = dir.empty() ? flag : absl::StrCat(file, " of ", dir_source);
      return Annotate(common::ReadPemFile(path, absl::StrCat(what, " (", from, ")")).status(), who);
    };
    DLRM_RETURN_IF_ERROR(check(security.root_certs_path, "TLS CA", "--tls-ca", "ca.crt"));
    if (!security.cert_chain_path.empty()) {  // else a client with a token
      DLRM_RETURN_IF_ERROR(
          check(security.cert_chain_path, "TLS certificate", "--tls-cert", "tls.crt"));
      DLRM_RETURN_IF_ERROR(check(security.private_key_path, "TLS key", "--tls-key", "tls.key"));
      auto from = [&](const char* flag, const char* file) {
        return dir.empty() ? std::string(flag) : absl::StrCat(file, " of ", dir_source);
      };
      DLRM_RETURN_IF_ERROR(
          Annotate(CheckCertificateAndKey(security.cert_chain_path, from("--tls-cert", "tls.crt"),
                                          security.private_key_path, from("--tls-key", "tls.key")),
                   who));
    }
    return security;
  }
  if (!flags.token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": a bearer token is only sent over TLS: give --tls-ca (or --tls-dir) as well"));
  }
  if (flags.insecure) {
    DLRM_LOG(WARNING) << who << ": --insecure: plaintext gRPC"
                      << (listen_address.empty() ? "" : absl::StrCat(" on ", listen_address))
                      << "; anyone who can reach it can submit, cancel and corrupt jobs";
    return security;
  }
  if (!listen_address.empty() && !IsLoopbackAddress(listen_address)) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": refusing to serve plaintext gRPC on ", listen_address,
        " (not loopback): give --tls-dir (or --tls-cert, --tls-key, --tls-ca; `dlrm certs` makes "
        "them), or --insecure to accept that anyone who reaches the port controls the cluster"));
  }
  return security;
}

}  // namespace dlrm::client
