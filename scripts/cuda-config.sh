#!/usr/bin/env bash
# Decides whether llama.cpp is built with CUDA, with which nvcc, and for which GPU architectures.
# cmake/llama.cmake runs it at configure time; run it by hand to see what `make build` would do.
#
#   cuda-config.sh [--cuda AUTO|ON|OFF] [--arch LIST] [--nvcc PATH]
#
# Prints four lines, KEY=VALUE:
#   cuda=ON|OFF
#   nvcc=PATH             (empty when OFF)
#   arch=LIST             architectures, separated by commas (empty when OFF)
#   why=...               one sentence for the configure log
# and exits 1, with the reason on stderr, when CUDA was asked for (ON) and cannot be had.
#
# --cuda AUTO (the default): CUDA when an nvcc is found and either an NVIDIA GPU is visible
#   (nvidia-smi lists one, or /dev/nvidia0 exists) or --arch is given; the CPU otherwise. A machine
#   with the CUDA toolkit but no GPU (a CI box) stays on the CPU, and says why.
# --cuda ON: CUDA; fails without an nvcc, or without both a GPU and --arch.
# --cuda OFF: the CPU, whatever is installed.
# --arch: CMAKE_CUDA_ARCHITECTURES, ';' or ',' separated (e.g. "90;121a-real"). Without it, the
#   visible GPUs' compute capabilities (nvidia-smi), each as NN-real; 12x becomes 12xa-real (GB10,
#   sm_121: 121a-real), as ggml itself does for 12x; "native" when nvidia-smi cannot tell.
# nvcc is looked for in this order: --nvcc, $CUDACXX, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, then
#   /usr/local/cuda/bin (where the CUDA packages and DGX OS put it, off root's PATH) and the newest
#   /usr/local/cuda-*/bin.
#
# For tests: TANDEM_CUDA_DIRS replaces the /usr/local/cuda* folders searched (space separated),
# TANDEM_NVIDIA_DEVICE replaces /dev/nvidia0.
set -euo pipefail
die() { echo "cuda-config: $*" >&2; exit 1; }

mode=AUTO arch="" nvcc=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) mode=${2:-}; shift 2 ;;
    --arch) arch=${2:-}; shift 2 ;;
    --nvcc) nvcc=${2:-}; shift 2 ;;
    *) die "unknown option $1 (usage: cuda-config.sh [--cuda AUTO|ON|OFF] [--arch LIST] [--nvcc PATH])" ;;
  esac
done
case "${mode^^}" in
  ""|AUTO) mode=AUTO ;;
  ON|TRUE|YES|1) mode=ON ;;
  OFF|FALSE|NO|0) mode=OFF ;;
  *) die "--cuda must be AUTO, ON or OFF, not '$mode'" ;;
esac
arch=${arch//;/,}
arch=${arch#,}
arch=${arch%,}

emit() {  # cuda nvcc arch why
  printf 'cuda=%s\nnvcc=%s\narch=%s\nwhy=%s\n' "$1" "$2" "$3" "$4"
  exit 0
}

if [ "$mode" = OFF ]; then
  emit OFF "" "" "CPU only (TANDEM_CUDA=OFF)"
fi

# nvcc
find_nvcc() {
  local c
  for c in "${CUDACXX:-}" "$(command -v nvcc 2>/dev/null || true)" \
           "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "${CUDA_PATH:+$CUDA_PATH/bin/nvcc}"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  local dirs=${TANDEM_CUDA_DIRS-/usr/local/cuda}
  local newest
  # shellcheck disable=SC2086
  for c in $dirs; do
    [ -x "$c/bin/nvcc" ] && { echo "$c/bin/nvcc"; return 0; }
  done
  if [ -z "${TANDEM_CUDA_DIRS+set}" ]; then
    newest=$(ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$newest" ] && [ -x "$newest" ] && { echo "$newest"; return 0; }
  fi
  return 1
}
if [ -n "$nvcc" ]; then
  [ -x "$nvcc" ] || die "--nvcc $nvcc is not an executable"
else
  nvcc=$(find_nvcc || true)
fi
nvcc_version=""
[ -n "$nvcc" ] && nvcc_version=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -n 1)

# GPUs: their compute capabilities from nvidia-smi, or only that one exists.
gpu=no caps=""
if command -v nvidia-smi >/dev/null 2>&1; then
  if out=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null) &&
     [ -n "$out" ] && ! grep -qvE '^ *[0-9]+\.[0-9]+ *$' <<<"$out"; then
    gpu=yes
    caps=$(tr -d ' ' <<<"$out" | sort -u | tr '\n' ' ')
  elif timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    gpu=yes
  fi
fi
if [ "$gpu" = no ] && [ -e "${TANDEM_NVIDIA_DEVICE:-/dev/nvidia0}" ]; then
  gpu=yes
fi
gpu_arch() {  # from the compute capabilities, or native
  local c out="" a
  [ -z "$caps" ] && { echo native; return; }
  for c in $caps; do
    a="${c%%.*}${c#*.}"
    case "$a" in
      12[0-9]) a="${a}a-real" ;;
      *) a="${a}-real" ;;
    esac
    out+="${out:+,}$a"
  done
  echo "$out"
}

if [ "$mode" = ON ]; then
  [ -n "$nvcc" ] || die "TANDEM_CUDA=ON but no nvcc: not on PATH, CUDACXX, CUDA_HOME, nor /usr/local/cuda/bin (install the CUDA toolkit, or set CUDACXX=/path/to/nvcc)"
  if [ -z "$arch" ]; then
    [ "$gpu" = yes ] || die "TANDEM_CUDA=ON but no NVIDIA GPU is visible to build for: give CMAKE_CUDA_ARCHITECTURES (GB10: 121a-real; H100/H200: 90; both: \"90;121a-real\")"
    arch=$(gpu_arch)
    emit ON "$nvcc" "$arch" "CUDA (TANDEM_CUDA=ON), nvcc $nvcc_version at $nvcc, for this machine's GPU: $arch"
  fi
  emit ON "$nvcc" "$arch" "CUDA (TANDEM_CUDA=ON), nvcc $nvcc_version at $nvcc, for $arch"
fi

# AUTO
if [ -z "$nvcc" ]; then
  if [ "$gpu" = yes ]; then
    emit OFF "" "" "CPU only: an NVIDIA GPU is here but no nvcc was found (PATH, CUDACXX, CUDA_HOME, /usr/local/cuda/bin); install the CUDA toolkit for a CUDA build, or say TANDEM_CUDA=OFF"
  fi
  emit OFF "" "" "CPU only: no NVIDIA GPU and no nvcc (TANDEM_CUDA=AUTO)"
fi
if [ -n "$arch" ]; then
  emit ON "$nvcc" "$arch" "CUDA (CMAKE_CUDA_ARCHITECTURES given), nvcc $nvcc_version at $nvcc, for $arch"
fi
if [ "$gpu" = yes ]; then
  arch=$(gpu_arch)
  emit ON "$nvcc" "$arch" "CUDA (TANDEM_CUDA=AUTO: a GPU and nvcc), nvcc $nvcc_version at $nvcc, for this machine's GPU: $arch"
fi
emit OFF "" "" "CPU only: nvcc $nvcc_version at $nvcc but no NVIDIA GPU is visible (TANDEM_CUDA=ON with CMAKE_CUDA_ARCHITECTURES builds for CUDA anyway)"
