#include "engine/common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace kiln {
namespace {

// Unique per process and call, so concurrent writers of one path never share a temp file.
std::string TempNameFor(const std::string& path) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(path, ".tmp.", getpid(), ".", rng());
}

absl::Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " '", path, "': ", std::strerror(e));
  if (e == EACCES || e == EPERM || e == EROFS) return absl::PermissionDeniedError(msg);
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(msg);
  if (e == EISDIR) return absl::InvalidArgumentError(absl::StrCat("'", path, "' is a folder"));
  return absl::InternalError(msg);
}

absl::Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Errno("cannot write", path);
    p += w;
    n -= w;
  }
  return absl::OkStatus();
}

// Creates the temp file for `path`, lets `fill` write it, then fsyncs and renames it into place.
template <typename Fill>
absl::Status Replace(const std::string& path, mode_t mode, Fill&& fill) {
  const std::string tmp = TempNameFor(path);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status st = fill(fd, tmp);
  if (st.ok() && fsync(fd) != 0) st = Errno("cannot flush", tmp);
  if (close(fd) != 0 && st.ok()) st = Errno("cannot close", tmp);
  if (st.ok() && rename(tmp.c_str(), path.c_str()) != 0) st = Errno("cannot rename into", path);
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

}  // namespace

absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes, mode_t mode) {
  return Replace(path, mode, [&](int fd, const std::string& tmp) {
    return WriteAll(fd, bytes.data(), bytes.size(), tmp);
  });
}

absl::Status WriteFilePartsAtomic(const std::string& path,
                                  absl::Span<const absl::string_view> parts, mode_t mode) {
  return Replace(path, mode, [&](int fd, const std::string& tmp) -> absl::Status {
    for (absl::string_view part : parts) {
      RETURN_IF_ERROR(WriteAll(fd, part.data(), part.size(), tmp));
    }
    return absl::OkStatus();
  });
}

absl::Status CopyFileAtomic(const std::string& from, const std::string& to, mode_t mode) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Errno("cannot open", from);
  absl::Status st = Replace(to, mode, [&](int fd, const std::string& tmp) -> absl::Status {
    std::string buf(1 << 20, '\0');
    for (;;) {
      ssize_t n = read(in, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("cannot read", from);
      if (n == 0) return absl::OkStatus();
      RETURN_IF_ERROR(WriteAll(fd, buf.data(), n, tmp));
    }
  });
  close(in);
  return st;
}

}  // namespace kiln
