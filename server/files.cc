#include "server/files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"

namespace kiln::server {

struct Sha256Stream::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256Stream::Sha256Stream() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr);
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256Stream::Update(absl::string_view bytes) {
  EVP_DigestUpdate(impl_->ctx, bytes.data(), bytes.size());
}

std::string Sha256Stream::FinishHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &n);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<std::pair<uint64_t, std::string>> FileDigest(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  Sha256Stream sha;
  std::string buf(1 << 20, '\0');
  uint64_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", strerror(errno)));
    }
    if (n == 0) break;
    sha.Update(absl::string_view(buf.data(), n));
    total += n;
  }
  close(fd);
  return std::make_pair(total, sha.FinishHex());
}

namespace {

std::string TempNameFor(const std::string& path) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(path, ".tmp.", getpid(), ".", rng());
}

absl::Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
    p += w;
    n -= w;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes) {
  std::string tmp = TempNameFor(path);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  absl::Status st = WriteAll(fd, bytes.data(), bytes.size(), tmp);
  if (st.ok() && fsync(fd) != 0) st = absl::InternalError(absl::StrCat("fsync ", tmp));
  close(fd);
  if (st.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", strerror(errno)));
  }
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

absl::Status CopyFileAtomic(const std::string& from, const std::string& to) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return absl::InternalError(absl::StrCat("cannot open ", from, ": ", strerror(errno)));
  std::string tmp = TempNameFor(to);
  int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    close(in);
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  }
  absl::Status st;
  std::string buf(1 << 20, '\0');
  for (;;) {
    ssize_t n = read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = absl::InternalError(absl::StrCat("cannot read ", from, ": ", strerror(errno)));
      break;
    }
    if (n == 0) break;
    st = WriteAll(out, buf.data(), n, tmp);
    if (!st.ok()) break;
  }
  if (st.ok() && fsync(out) != 0) st = absl::InternalError(absl::StrCat("fsync ", tmp));
  close(in);
  close(out);
  if (st.ok() && rename(tmp.c_str(), to.c_str()) != 0) {
    st =
        absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", to, ": ", strerror(errno)));
  }
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", strerror(errno)));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(out.size() + n) > max_bytes) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is larger than ", max_bytes, " bytes"));
    }
    out.append(buf, n);
  }
  close(fd);
  return out;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // remove_all does not follow symlinks
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", ec.message()));
  chmod(path.c_str(), 0700);
  return absl::OkStatus();
}

}  // namespace kiln::server
