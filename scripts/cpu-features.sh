#!/usr/bin/env bash
# Prints the GGML_* CMake flags for the x86 CPU features that this host really executes.
#
# llama.cpp's GGML_NATIVE trusts cpuid; on hosts whose cpuid reports AMX that faults, the CPU
# backend then crashes as soon as an IQ4_XS model loads. So each advertised feature is run once
# by scripts/cpu-probe.c in its own process, and only features that ran are enabled (AMX: never,
# see below).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "$(uname -m)" in
  x86_64) ;;
  *) echo "-DGGML_NATIVE=ON"; exit 0 ;;
esac
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
if ! "$cc" -O1 -o "$tmp/probe" "$here/cpu-probe.c" 2>"$tmp/cc.log"; then
  echo "cpu-features: cannot compile the CPU probe ($(head -1 "$tmp/cc.log")); using AVX2 only" >&2
  echo "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  exit 0
fi
runs() { timeout 10 "$tmp/probe" "$1" >/dev/null 2>&1; }
out="-DGGML_NATIVE=OFF"
enable() { # $1 = cpuinfo flags (all required), $2 = probe name, $3.. = cmake options
  local need=$1 probe=$2; shift 2
  for f in $need; do has "$f" || { for o in "$@"; do out+=" -D$o=OFF"; done; return; }; done
  if runs "$probe"; then
    for o in "$@"; do out+=" -D$o=ON"; done
  else
    echo "cpu-features: this CPU reports '$need' but the $probe probe faulted; building without it" >&2
    for o in "$@"; do out+=" -D$o=OFF"; done
  fi
}
enable "avx avx2 fma f16c bmi2" avx2 GGML_AVX GGML_AVX2 GGML_FMA GGML_F16C GGML_BMI2
enable "avx512f avx512bw avx512dq avx512vl" avx512 GGML_AVX512
enable "avx512_vbmi" avx512_vbmi GGML_AVX512_VBMI
enable "avx512_vnni" avx512_vnni GGML_AVX512_VNNI
enable "avx512_bf16" avx512_bf16 GGML_AVX512_BF16
enable "avx_vnni" avx_vnni GGML_AVX_VNNI
# AMX stays off even where its probe runs: on a Xeon VM whose cpuid reports AMX and where
# cpu-probe.c's AMX test passes (tile permission, config, multiply, in several threads), ggml's
# AMX matrix multiply still died with SIGILL (`tilezero` in ggml_backend_amx_mul_mat) on the first
# CPU decode. It speeds up only some quantised types on server CPUs; a crash costs far more.
out+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
echo "$out"
