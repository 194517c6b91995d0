// Executes one instruction of the CPU feature named in argv[1]; exits 0 when it ran.
// A CPU (or hypervisor) can advertise a feature in cpuid that faults when used (seen with AMX),
// so the build trusts only what this probe actually ran, in a child process per feature.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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

struct tile_config {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

__attribute__((target("amx-tile,amx-int8"))) static int run_amx(void) {
  // Linux hands out AMX tile state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 2;
  struct tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int i = 0; i < 3; ++i) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
  static int8_t a[16 * 64], b[16 * 64];
  static int32_t c[16 * 16];
  memset(a, 1, sizeof a);
  memset(b, 1, sizeof b);
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbssd(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0] == 64 ? 0 : 3;
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
  if (!strcmp(f, "amx")) return run_amx();
  fprintf(stderr, "unknown feature %s\n", f);
  return 64;
}
