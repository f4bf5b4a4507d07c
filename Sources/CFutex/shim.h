// Futex calls on a 32-bit word in shared memory (the frame ring's "published" word), and a
// non-variadic way to block SIGPIPE on one thread. glibc's syscall() is variadic, which Swift
// cannot call; these wrappers are not.
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/// Wakes every process waiting on `word` (a shared, not private, futex: other processes map it).
static inline long vf_futex_wake_all(uint32_t *word) {
    return syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/// Sleeps while `*word == expected`, at most `timeout_ns`. 0: woken or the value differs;
/// -1 with errno ETIMEDOUT, EAGAIN (value already differed) or EINTR.
static inline long vf_futex_wait(const uint32_t *word, uint32_t expected, int64_t timeout_ns) {
    struct timespec ts = { (time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000) };
    return syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

/// Blocks SIGPIPE on the calling thread, so a write to a pipe whose reader has gone fails with
/// EPIPE instead of killing the process. Returns 0 on success.
static inline int vf_block_sigpipe_on_this_thread(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    return pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/// Takes a pending SIGPIPE of this thread (raised by a failed write while blocked), so it is not
/// left pending. Returns 1 if one was pending.
static inline int vf_clear_pending_sigpipe(void) {
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    if (sigpending(&pending) != 0 || !sigismember(&pending, SIGPIPE)) return 0;
    struct timespec zero = { 0, 0 };
    return sigtimedwait(&set, NULL, &zero) == SIGPIPE;
}

/// Asks for a pipe buffer of `bytes` (F_SETPIPE_SZ, Linux); harmless on a file. Returns the new
/// size or -1.
static inline int vf_set_pipe_size(int fd, int bytes) {
    return fcntl(fd, 1031 /* F_SETPIPE_SZ */, bytes);
}
