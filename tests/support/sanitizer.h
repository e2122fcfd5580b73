#pragma once
// Whether this test program was built with AddressSanitizer, whose allocator replaces glibc's
// (and refuses glibc's mallopt settings).

namespace mlo_test {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

}  // namespace mlo_test
