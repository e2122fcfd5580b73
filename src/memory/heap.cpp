#include <mlo/memory/heap.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mlo {
namespace memory {
namespace {

int depth = 0;          // scopes alive
bool applied = false;   // whether the outermost one's settings took

}  // namespace

HeapReuse::HeapReuse() {
#if defined(__GLIBC__)
  if (depth++ == 0) {
    // mallopt returns 1 on success; a sanitizer's allocator answers 0 and changes nothing.
    const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
    // The largest value glibc accepts (an int): nothing at the top of the heap is trimmed.
    const bool no_trim = mallopt(M_TRIM_THRESHOLD, 0x7fffffff) == 1;
    applied = no_mmap && no_trim;
  }
  active_ = applied;
#endif
}

HeapReuse::~HeapReuse() {
#if defined(__GLIBC__)
  if (--depth > 0) return;
  if (applied) {
    mallopt(M_MMAP_MAX, 65536);  // glibc's default count of mapped blocks
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
    malloc_trim(0);
  }
  applied = false;
#endif
}

}  // namespace memory
}  // namespace mlo
