// libFuzzer itself is linked into the fuzz executables (-sanitize=fuzzer). Its archive refers to
// LLVMFuzzerTestOneInput from the member that also holds its own `main`; the targets run through
// LLVMFuzzerRunDriver with their own callback (FuzzDriver), so this definition only satisfies the
// link and is never called while fuzzing.
#include "CLibFuzzer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)data;
    (void)size;
    return 0;
}
