/* Stand-in for miniaudio: audio decoding always fails (unused by llmreplay's tests). */
#ifndef LLMREPLAY_MINIAUDIO_STANDIN_H
#define LLMREPLAY_MINIAUDIO_STANDIN_H
#include <stddef.h>
#include <stdint.h>
typedef int ma_result;
typedef uint64_t ma_uint64;
typedef int ma_format;
#define MA_SUCCESS 0
#define MA_ERROR (-1)
#define ma_format_f32 5
typedef struct { ma_format format; uint32_t channels; uint32_t sampleRate; } ma_decoder_config;
typedef struct { int unused; } ma_decoder;
static inline ma_decoder_config ma_decoder_config_init(ma_format f, uint32_t c, uint32_t r) { ma_decoder_config d = {f, c, r}; return d; }
static inline ma_result ma_decoder_init_memory(const void *b, size_t n, const ma_decoder_config *c, ma_decoder *d) { (void)b; (void)n; (void)c; (void)d; return MA_ERROR; }
static inline ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *d, ma_uint64 *n) { (void)d; *n = 0; return MA_ERROR; }
static inline ma_result ma_decoder_read_pcm_frames(ma_decoder *d, void *o, ma_uint64 n, ma_uint64 *r) { (void)d; (void)o; (void)n; *r = 0; return MA_ERROR; }
static inline ma_result ma_decoder_uninit(ma_decoder *d) { (void)d; return MA_SUCCESS; }
#endif
