// Gives freed heap memory back to the system (glibc's malloc_trim), except under
// AddressSanitizer: its allocator replaces glibc's, whose trim then walks arenas it never set up
// (a SEGV in mtrim, seen in the ASan server tests).
#pragma once

#include <malloc.h>

namespace kiln::server {

inline void TrimMalloc() {
#if !defined(__SANITIZE_ADDRESS__)
  malloc_trim(0);
#endif
}

}  // namespace kiln::server
