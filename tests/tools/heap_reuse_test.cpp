// HeapReuse: inside the scope a large block freed and allocated again is the same memory, with
// no mapping and no page faults; after it, glibc maps large blocks again.
#include "ablate/heap_reuse.h"

#include "support/sanitizer.h"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/resource.h>
#endif

namespace heap_reuse_test {

#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 33)

constexpr std::size_t kBlock = 64u << 20;  // above any mmap threshold glibc accepts (32 MiB)

// Minor page faults of this process so far.
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Bytes in blocks glibc mapped on their own.
int64_t mapped_bytes() { return static_cast<int64_t>(mallinfo2().hblkhd); }

// Writes one byte per 4 KiB page, so each page is in use (faulted in, if it was not).
void touch(void* block) {
  volatile char* bytes = static_cast<volatile char*>(block);
  for (std::size_t i = 0; i < kBlock; i += 4096) bytes[i] = 1;
}

// The minor faults of allocating a block, touching every page and freeing it; `mapped` is set to
// how many more bytes glibc had mapped on their own while the block was held.
long faults_of_one_block(int64_t* mapped) {
  const int64_t mapped_before = mapped_bytes();
  const long before = minor_faults();
  void* block = std::malloc(kBlock);
  REQUIRE(block != nullptr);
  touch(block);
  const long faults = minor_faults() - before;
  *mapped = mapped_bytes() - mapped_before;
  std::free(block);
  return faults;
}

TEST_CASE("HeapReuse: a freed large block is reused without mapping or faults", "[memory][heap]") {
  int64_t mapped = 0;
  {
    mlo::memory::HeapReuse reuse;
    if (mlo_test::kAddressSanitizer) {
      // ASan's allocator stands in for glibc's and refuses its settings.
      CHECK_FALSE(reuse.active());
      return;
    }
    REQUIRE(reuse.active());
    faults_of_one_block(&mapped);  // the heap grows to hold it once
    CHECK(mapped == 0);
    const long again = faults_of_one_block(&mapped);
    CHECK(mapped == 0);
    // 16384 pages of 4 KiB; reused memory is already resident.
    INFO("minor faults on reuse: " << again);
    CHECK(again < 256);
    {
      mlo::memory::HeapReuse inner;  // nested: its end leaves the outer scope's settings
      CHECK(inner.active());
    }
    faults_of_one_block(&mapped);
    CHECK(mapped == 0);
  }
  // After the scope: glibc maps a block this large on its own again.
  faults_of_one_block(&mapped);
  CHECK(mapped >= static_cast<int64_t>(kBlock));
}

#endif  // glibc 2.33: mallinfo2
#else

TEST_CASE("HeapReuse: does nothing without glibc", "[memory][heap]") {
  mlo::memory::HeapReuse reuse;
  CHECK_FALSE(reuse.active());
}

#endif

}  // namespace heap_reuse_test
