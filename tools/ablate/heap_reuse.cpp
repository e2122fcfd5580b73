#include "heap_reuse.h"

#include <cstddef>  // defines __GLIBC__ (through <features.h>) before the tests below

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mlo {
namespace memory {
namespace {

int depth = 0;            // scopes alive
bool mmap_off = false;    // the outermost scope turned glibc's own mappings off
bool trim_off = false;    // ... and trimming

}  // namespace

HeapReuse::HeapReuse() {
#if defined(__GLIBC__)
  if (depth++ == 0) {
    // mallopt returns 1 on success; a sanitizer's allocator answers otherwise and changes
    // nothing. Each setting is undone on its own, so a half-applied pair does not outlive the
    // scope.
    mmap_off = mallopt(M_MMAP_MAX, 0) == 1;
    trim_off = mallopt(M_TRIM_THRESHOLD, -1) == 1;  // -1: SIZE_MAX, never trim
  }
  active_ = mmap_off && trim_off;
#endif
}

HeapReuse::~HeapReuse() {
#if defined(__GLIBC__)
  if (--depth > 0) return;
  if (mmap_off) mallopt(M_MMAP_MAX, 65536);  // glibc's default count of mapped blocks
  if (trim_off) mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
  if (mmap_off || trim_off) malloc_trim(0);
  mmap_off = trim_off = false;
#endif
}

}  // namespace memory
}  // namespace mlo
