#pragma once
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's entry point for programs that have their own `main` (compiler-rt's
/// FuzzerInterface.h): runs the fuzzer with the command line and calls `callback` per input.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#include <sys/syscall.h>
#include <unistd.h>

/// An anonymous in-memory file (memfd_create(2)), for readers that want a path or a descriptor.
static inline int fuzz_memfd(const char *name) { return (int)syscall(SYS_memfd_create, name, 0u); }
