#include "engine/common/sha256.h"

#include <openssl/sha.h>

namespace kiln {

Sha256Digest Sha256(const void* data, size_t size) {
  Sha256Digest d;
  SHA256(static_cast<const unsigned char*>(data), size, d.data());
  return d;
}

std::string DigestHex(const Sha256Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

}  // namespace kiln
