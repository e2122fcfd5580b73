/* Preloaded by scripts/as_avx2_cpu.sh: makes LibTorch see an x86-64 CPU without AVX-512, as on
 * machines with AVX2 only. LibTorch 1.13 decides whether to run bf16 through oneDNN from
 * cpuinfo's view of the CPU (a shared library in Debian's build), which ONEDNN_MAX_CPU_ISA does
 * not change; this wraps cpuinfo_initialize and clears the AVX-512 flags it found. */
#define _GNU_SOURCE
#include <cpuinfo.h>
#include <dlfcn.h>
#include <stdbool.h>

bool cpuinfo_initialize(void) {
  static bool (*real)(void) = 0;
  if (!real) real = (bool (*)(void))dlsym(RTLD_NEXT, "cpuinfo_initialize");
  const bool ok = real != 0 && real();
  /* (looked up, not referenced: every other program the preload reaches lacks cpuinfo) */
  struct cpuinfo_x86_isa* isa = (struct cpuinfo_x86_isa*)dlsym(RTLD_DEFAULT, "cpuinfo_isa");
  if (isa == 0) return ok;
  isa->avx512f = isa->avx512pf = isa->avx512er = isa->avx512cd = false;
  isa->avx512dq = isa->avx512bw = isa->avx512vl = isa->avx512ifma = false;
  isa->avx512vbmi = isa->avx512vbmi2 = isa->avx512bitalg = isa->avx512vpopcntdq = false;
  isa->avx512vnni = isa->avx512bf16 = isa->avx512vp2intersect = false;
  isa->avx512_4vnniw = isa->avx512_4fmaps = false;
  return ok;
}
