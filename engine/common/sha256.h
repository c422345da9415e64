// SHA-256 digests (OpenSSL libcrypto): the engine blob's header and metadata, model digests.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

using Sha256Digest = std::array<uint8_t, 32>;

/// Digest of `size` bytes at `data`.
Sha256Digest Sha256(const void* data, size_t size);
inline Sha256Digest Sha256(std::string_view s) { return Sha256(s.data(), s.size()); }

/// Lower-case hex of a digest.
std::string DigestHex(const Sha256Digest& d);

}  // namespace kiln
