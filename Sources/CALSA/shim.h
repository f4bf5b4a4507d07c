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
// ALSA reports errors to stderr through a variadic handler, which Swift cannot define.
static void vf_alsa_silent_error(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
static inline void vf_alsa_silence_errors(void) { snd_lib_error_set_handler(vf_alsa_silent_error); }
#endif
