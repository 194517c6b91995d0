// Executes one instruction of the CPU feature named in argv[1]; exits 0 when it ran.
// A CPU (or hypervisor) can advertise a feature in cpuid that faults when used (seen with AMX,
// which scripts/cpu-features.sh now leaves off), so the build trusts only what this probe
// actually ran, in a child process per feature.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static volatile int sink;

__attribute__((target("avx2,fma,f16c,bmi2"))) static int run_avx2(void) {
  __m256 a = _mm256_set1_ps(1.5f);
  a = _mm256_fmadd_ps(a, a, a);
  __m128i h = _mm256_cvtps_ph(a, 0);
  sink = _mm_extract_epi16(h, 0) + (int)_pdep_u32(5, 3);
  return 0;
}
__attribute__((target("avx512f"))) static int run_avx512(void) {
  __m512 a = _mm512_set1_ps(2.0f);
  sink = (int)_mm512_reduce_add_ps(_mm512_mul_ps(a, a));
  return 0;
}
__attribute__((target("avx512f,avx512vbmi"))) static int run_avx512_vbmi(void) {
  __m512i a = _mm512_set1_epi8(3);
  sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(_mm512_permutexvar_epi8(a, a)));
  return 0;
}
__attribute__((target("avx512f,avx512vnni"))) static int run_avx512_vnni(void) {
  __m512i a = _mm512_set1_epi8(3);
  sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(_mm512_dpbusd_epi32(a, a, a)));
  return 0;
}
__attribute__((target("avx512f,avx512bf16"))) static int run_avx512_bf16(void) {
  __m512 a = _mm512_set1_ps(2.0f);
  __m512bh b = _mm512_cvtne2ps_pbh(a, a);
  sink = (int)_mm512_reduce_add_ps(_mm512_dpbf16_ps(a, b, b));
  return 0;
}
__attribute__((target("avxvnni"))) static int run_avx_vnni(void) {
  __m256i a = _mm256_set1_epi8(3);
  sink = _mm256_extract_epi32(_mm256_dpbusd_avx_epi32(a, a, a), 0);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) return 64;
  const char* f = argv[1];
  if (!strcmp(f, "avx2")) return run_avx2();
  if (!strcmp(f, "avx512")) return run_avx512();
  if (!strcmp(f, "avx512_vbmi")) return run_avx512_vbmi();
  if (!strcmp(f, "avx512_vnni")) return run_avx512_vnni();
  if (!strcmp(f, "avx512_bf16")) return run_avx512_bf16();
  if (!strcmp(f, "avx_vnni")) return run_avx_vnni();
  fprintf(stderr, "unknown feature %s\n", f);
  return 64;
}
