#pragma once
/// \file
/// A scope in which the C heap keeps freed memory for reuse instead of giving it back.

namespace mlo {
namespace memory {

/// While one is alive (glibc's allocator only; elsewhere it does nothing and active() is false),
/// the main arena serves no allocation by a mapping of its own and never trims free memory at the
/// top of the heap. glibc otherwise maps every block above its mmap threshold (which it raises by
/// itself, to 32 MiB at most) afresh and unmaps it on free, so each new tensor of a large model
/// pays a page fault per 4 KiB touched: on a ResNet-50 at batch 100 that was a sixth of the
/// process's CPU time, spent in the kernel, and it varies with the kernel's state. With one alive,
/// a freed block is reused as CUDA's caching allocator reuses device memory. What it costs: memory
/// freed stays resident until the scope ends. Blocks allocated by threads other than the main one
/// come from their own arenas, which glibc still maps (64 MiB at a time, larger requests directly)
/// and trims.
///
/// Scopes nest (only the outermost one changes the settings). When the last one ends, mapping is
/// allowed again, the trim threshold is 64 MiB (twice the largest mmap threshold glibc's own
/// adjustment reaches) and free memory is given back (`malloc_trim`). The change is not undone
/// entirely: once set through `mallopt`, glibc stops adjusting its thresholds for the rest of
/// the process, and the mmap threshold stays where it was when the first scope opened. Not
/// thread-safe against another thread opening or closing a scope.
class HeapReuse {
 public:
  HeapReuse();
  ~HeapReuse();
  HeapReuse(const HeapReuse&) = delete;
  HeapReuse& operator=(const HeapReuse&) = delete;

  /// Whether glibc accepted the settings: false where the C library is not glibc or where
  /// `mallopt` refused them (a sanitizer's allocator, for one). An allocator preloaded in
  /// glibc's place (jemalloc) leaves glibc's `mallopt` answering yes while changing nothing.
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

}  // namespace memory
}  // namespace mlo
