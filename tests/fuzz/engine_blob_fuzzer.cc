// Fuzz harnesses: engine blob reader (engine/plan/engine_blob.h).
//   engine_blob:          the bytes as they are, through LoadEngineFromBytes and, via a memfd,
//                         LoadEngineFile (the mmap path `kiln run` and the server use); both must
//                         agree. Most mutations stop at a digest check here.
//   engine_blob_resigned: the bytes with every section digest and the header digest recomputed
//                         first (ResignBlob), the way tests/plan/engine_blob_test.cc re-digests
//                         a tampered blob, so mutations reach the metadata and graph parsing.
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/common/sha256.h"
#include "engine/plan/engine_blob.h"
#include "tests/fuzz/harnesses.h"

namespace kiln::fuzz {
namespace {

// Layout from engine_blob.h's format description.
constexpr size_t kHeaderBytes = 64;
constexpr size_t kEntryBytes = 56;
constexpr size_t kDigestBytes = 32;

template <typename T>
T Get(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// Writes the digest field of one section as the format defines it.
void PutSectionDigest(std::string& blob, size_t entry, uint32_t kind, uint64_t offset,
                      uint64_t size) {
  std::array<uint8_t, kDigestBytes> field{};
  if (kind == plan::kSectionWeights) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(blob.data() + offset, size));
    std::memcpy(field.data(), canonical.digest, sizeof(canonical.digest));
  } else {
    Sha256Digest d = Sha256(blob.data() + offset, size);
    std::memcpy(field.data(), d.data(), kDigestBytes);
  }
  std::memcpy(&blob[entry + 24], field.data(), kDigestBytes);
}

// Recomputes every digest the (possibly mutated) header can point at: each section whose
// offset and size lie inside the blob, then the header digest. Leaves the rest alone, so a table
// that points outside the blob still reaches the reader's bounds checks.
std::string ResignBlob(absl::string_view data) {
  std::string blob(data);
  if (blob.size() < kHeaderBytes) return blob;
  uint64_t count = Get<uint32_t>(blob, 12);
  if (count > (blob.size() - kHeaderBytes) / kEntryBytes) return blob;
  size_t table_end = kHeaderBytes + count * kEntryBytes;
  for (uint64_t i = 0; i < count; ++i) {
    size_t e = kHeaderBytes + i * kEntryBytes;
    uint32_t kind = Get<uint32_t>(blob, e);
    uint64_t offset = Get<uint64_t>(blob, e + 8);
    uint64_t size = Get<uint64_t>(blob, e + 16);
    if (offset > blob.size() || size > blob.size() - offset) continue;
    PutSectionDigest(blob, e, kind, offset, size);
  }
  if (table_end + kDigestBytes <= blob.size()) {
    Sha256Digest hd = Sha256(blob.data(), table_end);
    std::memcpy(&blob[table_end], hd.data(), kDigestBytes);
  }
  return blob;
}

// Checks a loaded engine hangs together (the reader validated it; a broken one is a reader bug).
absl::Status CheckEngine(const plan::Engine& e) {
  KILN_FUZZ_EXPECT(e.graph != nullptr, "no graph");
  KILN_FUZZ_EXPECT(e.order.size() == e.graph->nodes().size(), "order and nodes differ");
  for (const ir::Node* n : e.order) {
    KILN_FUZZ_EXPECT(n != nullptr, "null node in order");
  }
  return absl::OkStatus();
}

// The same bytes through the file path: an anonymous memory file, mapped by LoadEngineFile.
absl::StatusOr<std::unique_ptr<plan::Engine>> LoadThroughFile(absl::string_view data) {
  int fd = memfd_create("kiln-fuzz-blob", MFD_CLOEXEC);
  if (fd < 0) return absl::UnavailableError("memfd_create failed");
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("write to memfd failed");
    }
    done += static_cast<size_t>(n);
  }
  auto engine = plan::LoadEngineFile(absl::StrCat("/proc/self/fd/", fd));
  close(fd);
  return engine;
}

absl::Status LoadBothWays(absl::string_view data) {
  auto from_bytes = plan::LoadEngineFromBytes(std::make_shared<const std::string>(data));
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(from_bytes.status(), "LoadEngineFromBytes"));
  if (from_bytes.ok()) KILN_FUZZ_RETURN_IF_ERROR(CheckEngine(**from_bytes));

  auto from_file = LoadThroughFile(data);
  if (from_file.status().code() == absl::StatusCode::kUnavailable) return absl::OkStatus();
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(from_file.status(), "LoadEngineFile"));
  KILN_FUZZ_EXPECT(from_file.ok() == from_bytes.ok(),
                   absl::StrCat("bytes: ", from_bytes.status().ToString(),
                                "; file: ", from_file.status().ToString()));
  if (from_file.ok()) {
    KILN_FUZZ_RETURN_IF_ERROR(CheckEngine(**from_file));
    KILN_FUZZ_EXPECT((*from_file)->order.size() == (*from_bytes)->order.size(),
                     "the two paths rebuilt different graphs");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EngineBlobOneInput(absl::string_view data) { return LoadBothWays(data); }

absl::Status EngineBlobResignedOneInput(absl::string_view data) {
  return LoadBothWays(ResignBlob(data));
}

}  // namespace kiln::fuzz
