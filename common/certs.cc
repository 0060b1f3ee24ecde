#include "common/certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace dlrm::common {
namespace {

namespace fs = std::filesystem;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

// OpenSSL's queued errors, oldest first, as one message.
absl::Status OpenSslError(const std::string& what) {
  std::string detail;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof(buffer));
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", buffer);
  }
  return absl::InternalError(
      absl::StrCat("certificates: ", what, " failed", detail.empty() ? "" : ": ", detail));
}

// A name a certificate's DNS SAN can hold and a client can match: dot-separated labels of 1 to 63
// letters, digits and '-' (neither first nor last), 253 characters at most, "*" allowed as the
// first label of a longer name, and a last label that is not all digits ("10.0.0.256").
bool IsDnsName(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  const std::vector<absl::string_view> labels = absl::StrSplit(host, '.');
  for (size_t i = 0; i < labels.size(); ++i) {
    const absl::string_view label = labels[i];
    if (label == "*" && i == 0 && labels.size() > 1) continue;
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  const absl::string_view last = labels.back();
  return !std::all_of(last.begin(), last.end(),
                      [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid)));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslError(absl::StrCat("adding extension ", OBJ_nid2sn(nid)));
  return absl::OkStatus();
}

// A certificate for `common_name` with `key`, signed by `issuer_key` (and named after `issuer`;
// self-signed when issuer is null).
absl::StatusOr<Cert> MakeCertificate(const std::string& common_name, EVP_PKEY* key, X509* issuer,
                                     EVP_PKEY* issuer_key, const ClusterCertOptions& options) {
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("X509_new");
  X509_set_version(cert.get(), 2);  // v3
  BIGNUM* serial = BN_new();
  if (serial == nullptr || BN_rand(serial, 120, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get())) == nullptr) {
    BN_free(serial);
    return OpenSslError("serial number");
  }
  BN_free(serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(options.valid_days) * 86400);
  if (X509_set_pubkey(cert.get(), key) != 1) return OpenSslError("X509_set_pubkey");
  X509_NAME* name = X509_get_subject_name(cert.get());
  const auto* o = reinterpret_cast<const unsigned char*>("dlrm");
  const auto* cn = reinterpret_cast<const unsigned char*>(common_name.c_str());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, o, -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, cn, -1, -1, 0) != 1) {
    return OpenSslError("subject name");
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1) {
    return OpenSslError("issuer name");
  }
  if (issuer == nullptr) {
    DLRM_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE"));
    DLRM_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
    DLRM_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash"));
  } else {
    std::vector<std::string> names;
    for (const std::string& host : options.hosts) {
      names.push_back(absl::StrCat(IsIpAddress(host) ? "IP:" : "DNS:", host));
    }
    DLRM_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
    DLRM_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature"));
    DLRM_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
    DLRM_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_subject_alt_name, absl::StrJoin(names, ",")));
    DLRM_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid"));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("X509_sign");
  return cert;
}

// The files of one `dlrm certs` run, each written whole to "<name>.tmp" first (keys created
// 0600, so never readable by others, whatever the umask) and renamed over its name only once every
// one is written: a run that fails (a full disk, a read-only folder) leaves the certificates that
// were there as they were, and no empty file that a later run would take for a CA.
class CertFiles {
 public:
  ~CertFiles() {
    std::error_code ec;
    for (const auto& [tmp, path] : written_) fs::remove(tmp, ec);
  }
  absl::Status Write(const fs::path& path, const std::string& text, bool secret) {
    const fs::path tmp = fs::path(path.string() + ".tmp");
    std::error_code ec;
    fs::remove(tmp, ec);
    const int fd =
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, secret ? 0600 : 0644);
    if (fd < 0) return FileError(errno, absl::StrCat("cannot write '", tmp.string(), "'"));
    written_.emplace_back(tmp, path);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        ::close(fd);
        return FileError(err, absl::StrCat("cannot write '", tmp.string(), "'"));
      }
      done += static_cast<size_t>(n);
    }
    const bool synced = ::fsync(fd) == 0;
    const int err = errno;
    if (::close(fd) != 0 || !synced) {
      return FileError(synced ? errno : err, absl::StrCat("cannot write '", tmp.string(), "'"));
    }
    return absl::OkStatus();
  }
  // Renames every file written over its name.
  absl::Status Commit() {
    for (const auto& [tmp, path] : written_) {
      if (::rename(tmp.c_str(), path.c_str()) != 0) {
        return FileError(errno, absl::StrCat("cannot replace '", path.string(), "'"));
      }
    }
    written_.clear();
    return absl::OkStatus();
  }

 private:
  std::vector<std::pair<fs::path, fs::path>> written_;  // (temporary file, its name)
};

absl::StatusOr<std::string> ToPem(X509* cert) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return OpenSslError("PEM_write_bio_X509");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::string> ToPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("PEM_write_bio_PrivateKey");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<Pkey> NewKey() {
  Pkey key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EC P-256 key generation");
  return key;
}

}  // namespace

absl::Status WriteClusterCertificates(const ClusterCertOptions& options) {
  if (options.out_dir.empty()) return absl::InvalidArgumentError("certificates: no --out folder");
  if (options.hosts.empty()) {
    return absl::InvalidArgumentError("certificates: no host names (--host) to put in them");
  }
  for (const std::string& host : options.hosts) {
    if (!IsIpAddress(host) && !IsDnsName(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "certificates: --host '", Shown(host),
          "' is neither an IP address nor a DNS name (letters, digits and '-' in dot-separated "
          "labels, '*.' first for a wildcard; no port, scheme or zone)"));
    }
  }
  if (options.valid_days < 1 || options.valid_days > 3650) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificates: valid_days ", options.valid_days, " is outside [1, 3650]"));
  }
  const fs::path out(options.out_dir);
  std::error_code ec;
  if (!options.overwrite) {
    for (const char* name : {"ca.key", "ca.crt"}) {
      const fs::path existing = out / name;
      if (fs::exists(fs::symlink_status(existing, ec))) {
        return absl::AlreadyExistsError(absl::StrCat(
            "certificates: '", existing.string(), "' exists: '", out.string(),
            "' already holds a CA, and a new one would break every certificate it issued "
            "(--overwrite replaces it)"));
      }
    }
  }
  fs::create_directories(out, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", out.string(), "': ", ec.message()));
  }
  DLRM_ASSIGN_OR_RETURN(Pkey ca_key, NewKey());
  DLRM_ASSIGN_OR_RETURN(Cert ca,
                        MakeCertificate("dlrm-ca", ca_key.get(), nullptr, ca_key.get(), options));
  DLRM_ASSIGN_OR_RETURN(std::string ca_pem, ToPem(ca.get()));
  DLRM_ASSIGN_OR_RETURN(std::string ca_key_pem, ToPem(ca_key.get()));
  CertFiles files;
  DLRM_RETURN_IF_ERROR(files.Write(out / "ca.crt", ca_pem, false));
  DLRM_RETURN_IF_ERROR(files.Write(out / "ca.key", ca_key_pem, true));
  for (const char* identity : kCertIdentities) {
    const fs::path dir = out / identity;
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create '", dir.string(), "': ", ec.message()));
    }
    DLRM_ASSIGN_OR_RETURN(Pkey key, NewKey());
    DLRM_ASSIGN_OR_RETURN(Cert cert,
                          MakeCertificate(identity, key.get(), ca.get(), ca_key.get(), options));
    DLRM_ASSIGN_OR_RETURN(std::string cert_pem, ToPem(cert.get()));
    DLRM_ASSIGN_OR_RETURN(std::string key_pem, ToPem(key.get()));
    DLRM_RETURN_IF_ERROR(files.Write(dir / "tls.crt", cert_pem, false));
    DLRM_RETURN_IF_ERROR(files.Write(dir / "tls.key", key_pem, true));
    DLRM_RETURN_IF_ERROR(files.Write(dir / "ca.crt", ca_pem, false));
  }
  return files.Commit();
}

}  // namespace dlrm::common
