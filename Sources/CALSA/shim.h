// ALSA PCM capture. Function-like macros used by the engine are re-exported as functions.
#ifndef VIEWFINDER_CALSA_SHIM_H
#define VIEWFINDER_CALSA_SHIM_H
#include <alsa/asoundlib.h>
static inline size_t vf_snd_pcm_hw_params_sizeof(void) { return snd_pcm_hw_params_sizeof(); }
static inline size_t vf_snd_pcm_sw_params_sizeof(void) { return snd_pcm_sw_params_sizeof(); }
#endif
