// ALSA PCM capture. The error numbers the engine classifies are exposed as constants.
#ifndef VIEWFINDER_CALSA_SHIM_H
#define VIEWFINDER_CALSA_SHIM_H
#include <alsa/asoundlib.h>
#include <errno.h>
static const int vf_EPIPE = EPIPE;
static const int vf_ESTRPIPE = ESTRPIPE;
static const int vf_EAGAIN = EAGAIN;
static const int vf_EBUSY = EBUSY;
static const int vf_ENODEV = ENODEV;
static const int vf_ENOENT = ENOENT;
static const int vf_EINVAL = EINVAL;
static const int vf_EBADFD = EBADFD;
static const int vf_EIO = EIO;
// ALSA reports errors to stderr through a variadic handler, which Swift cannot define. The
// handler keeps nothing on stderr; the messages of reading ALSA's configuration files (conf.c: a
// syntax error in ~/.asoundrc makes every device fail to open with EINVAL) are kept
// for the calling thread, so that an open that fails can say why instead of "does not exist".
#include <stdarg.h>
#include <string.h>
// In a function: Swift's importer emits a header's functions, not its variables. (Each Swift
// file that calls these gets its own copy; ALSA.swift alone calls them.)
static inline char *vf_alsa_config_buffer(void) { static _Thread_local char b[512]; return b; }
static void vf_alsa_silent_error(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)line; (void)function; (void)err;
    // conf.c alone: reading the files (confmisc.c's "Cannot get card index" is a missing card).
    // (Its name as libasound was built: "conf.c" or a path ending in "/conf.c".)
    if (file == NULL) return;
    const char *base = strrchr(file, '/');
    if (strcmp(base ? base + 1 : file, "conf.c") != 0) return;
    char *buffer = vf_alsa_config_buffer();
    const size_t size = 512;
    size_t used = strlen(buffer);
    if (used + 4 >= size) return;
    char *at = buffer + used;
    size_t room = size - used;
    if (used > 0) { memcpy(at, "; ", 3); at += 2; room -= 2; }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at, room, fmt, ap);
    va_end(ap);
}
static inline void vf_alsa_silence_errors(void) { snd_lib_error_set_handler(vf_alsa_silent_error); }
/// The configuration messages ALSA gave this thread since the last clear ("" when none).
static inline const char *vf_alsa_config_errors(void) { return vf_alsa_config_buffer(); }
static inline void vf_alsa_clear_config_errors(void) { vf_alsa_config_buffer()[0] = 0; }
#endif
