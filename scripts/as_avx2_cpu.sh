#!/usr/bin/env bash
# Runs a command as on an x86-64 CPU with AVX2 and without AVX-512 (no native bf16), so that a
# machine with AVX-512 proves what mlo does on the common AVX2-only ones: oneDNN's kernels capped
# at AVX2 (ONEDNN_MAX_CPU_ISA), ATen's at AVX2 (ATEN_CPU_CAPABILITY), and, for Debian's LibTorch
# 1.13, whose bf16 path follows cpuinfo's view of the CPU, cpuinfo's AVX-512 flags cleared by a
# preloaded library (tests/support/cpu_without_avx512.c, compiled here into build/ on first use;
# it needs Debian's libcpuinfo-dev). CI runs the test suite this way.
#
# Usage: scripts/as_avx2_cpu.sh COMMAND [ARGS...]     e.g. scripts/as_avx2_cpu.sh scripts/test.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -eq 0 ]; then
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
shim="${root}/build/cpu_without_avx512.so"
source="${root}/tests/support/cpu_without_avx512.c"
if [ ! -f /usr/include/cpuinfo.h ]; then
  echo "error: /usr/include/cpuinfo.h is missing (Debian: apt-get install libcpuinfo-dev)" >&2
  exit 1
fi
if [ ! -f "${shim}" ] || [ "${source}" -nt "${shim}" ]; then
  mkdir -p "$(dirname "${shim}")"
  cc -shared -fPIC -O2 -Wall -Wextra "${source}" -o "${shim}" -ldl
fi
export ONEDNN_MAX_CPU_ISA=AVX2
export ATEN_CPU_CAPABILITY=avx2
export LD_PRELOAD="${shim}${LD_PRELOAD:+:${LD_PRELOAD}}"
echo "==> as on a CPU with AVX2 and without AVX-512: ONEDNN_MAX_CPU_ISA=AVX2," \
  "ATEN_CPU_CAPABILITY=avx2, cpuinfo's AVX-512 flags cleared" >&2
exec "$@"
