#pragma once
/// \file
/// A scope in which the C heap keeps freed memory for reuse instead of giving it back.

namespace mlo {
namespace memory {

/// While one is alive (glibc only; elsewhere it does nothing and active() is false), no
/// allocation is served by a mapping of its own and free memory at the top of the heap is not
/// trimmed. glibc otherwise maps every block above its mmap threshold (at most 32 MiB) afresh and
/// unmaps it on free, so each new tensor of a large model pays a page fault per 4 KiB touched:
/// on a ResNet-50 at batch 100 that is a sixth of the process's CPU time, spent in the kernel,
/// and it varies with the kernel's state. With one alive, a freed block is reused as CUDA's
/// caching allocator reuses device memory. What it costs: memory freed stays resident until the
/// scope ends.
///
/// Scopes nest (only the outermost one changes the settings). When the last one ends, mapping
/// is allowed again with the thresholds glibc's own adjustment reaches in a process that frees
/// large blocks (mmap threshold 32 MiB, trim threshold 64 MiB), and free memory is given back
/// (`malloc_trim`). Not thread-safe against another thread opening or closing a scope.
class HeapReuse {
 public:
  HeapReuse();
  ~HeapReuse();
  HeapReuse(const HeapReuse&) = delete;
  HeapReuse& operator=(const HeapReuse&) = delete;

  /// Whether the heap keeps freed memory now: false where the C library is not glibc or where
  /// it refused the settings (a sanitizer's allocator, for one).
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

}  // namespace memory
}  // namespace mlo
