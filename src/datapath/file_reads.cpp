// Before any header: a fortified <stdio.h> defines `fread` inline, and this file defines it.
#undef _FORTIFY_SOURCE

#include "datapath/file_reads.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace tandem::datapath {
namespace {

// The hook libc's fread runs: process-wide, like the hook table of datapath/interpose.cpp, because
// fread carries no context to find its caller's load by; set only while a load runs.
std::atomic<FileReadHook> g_hook{nullptr};

using FreadFn = size_t (*)(void*, size_t, size_t, FILE*);

FreadFn libc_fread() {
  static const FreadFn fn = reinterpret_cast<FreadFn>(::dlsym(RTLD_NEXT, "fread"));
  if (fn == nullptr) {
    std::fputs("tandem: fread not found in the C library (a build problem)\n", stderr);
    std::abort();
  }
  return fn;
}

}  // namespace

void set_file_read_hook(FileReadHook hook) { g_hook.store(hook, std::memory_order_release); }

size_t real_fread(void* ptr, size_t size, size_t n, FILE* stream) { return libc_fread()(ptr, size, n, stream); }

}  // namespace tandem::datapath

extern "C" {

// libllama's loader reads a weight without mmap with one call:
// pinned llama.cpp: text src/llama-mmap.cpp std::size_t ret = std::fread(ptr, to_read, 1, fp);
size_t fread(void* __restrict ptr, size_t size, size_t n, FILE* __restrict stream) {
  const tandem::datapath::FileReadHook hook = tandem::datapath::g_hook.load(std::memory_order_acquire);
  size_t items = 0;
  if (hook != nullptr && hook(ptr, size, n, stream, &items)) return items;
  return tandem::datapath::libc_fread()(ptr, size, n, stream);
}

// This file's own address of the definition, even where the public name is bound elsewhere.
__typeof__(fread) tandem_own_fread __attribute__((alias("fread"), visibility("hidden")));

}  // extern "C"

namespace tandem::datapath {

bool file_read_interposed() {
  return ::dlsym(RTLD_DEFAULT, "fread") == reinterpret_cast<void*>(&tandem_own_fread) &&
         ::dlsym(RTLD_NEXT, "fread") != nullptr;
}

}  // namespace tandem::datapath
