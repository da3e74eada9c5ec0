/*
 * explore_maps.h: the explorer's display maps: a head's T x T weights reduced
 * to D x D display cells (D = ceil(T / f) for a whole-number factor f >= 1;
 * a cell holds the weight of largest magnitude among its f x f pairs, so
 * sparse peaks stay visible) and quantised on the log scale to one byte a
 * cell (docs/explore.md, "Quantised maps"):
 *
 *   M = the head's largest |weight| (kept as float32 beside the codes);
 *   weights >= 0 everywhere ("u"): code 0 is |w| < 1e-7 M (and 0), codes
 *     1..255 are the levels M 10^(7 i / 254 - 7), i = 0..254, each weight
 *     taking the nearest level on the log scale (1 + the number of
 *     midpoints M 10^(7 (i + 0.5) / 254 - 7), i = 0..253, that |w| reaches);
 *   some weight < 0 ("s", softmax-free scores): code 128 is |w| < 1e-7 M,
 *     129 + l for positive and 127 - l for negative weights, l = 0..126 the
 *     nearest of the levels M 10^(7 l / 126 - 7) in the same way.
 * Decoded values are within 3.3 % ("u") or 6.7 % ("s") of the cell's weight.
 * Causal maps keep the lower triangle of display cells (row a holds cells
 * 0..a), bidirectional ones all D x D, row-major, rows are queries.
 *
 * In a page or a server reply a quantised map is one text line:
 *   ~M,u|s,f:BASE64(codes)
 * (M printed with 9 significant digits); an exact head is the base64 of its
 * float32 little-endian values with no prefix (explore_html.h).
 */
#ifndef AL_EXPLORE_MAPS_H
#define AL_EXPLORE_MAPS_H

#include <stddef.h>

/* Display cells per side for T tokens at factor f. */
int al_explore_display_side(int T, int f);
/* Stored codes of one map: D (D + 1) / 2 causal, D * D otherwise. */
size_t al_explore_map_cells(int T, int f, int causal);
/* Characters of one map's line (newline not included): an upper bound. */
size_t al_explore_map_line_cap(int T, int f, int causal);

/* Pools P[T, T] (rows are queries, masked pairs 0) at factor f and quantises
 * it: codes[al_explore_map_cells], the head's max |w| in *scale and whether
 * any weight is negative in *is_signed. rowbuf holds D floats. */
void al_explore_quantise(const float *P, int T, int f, int causal, float *rowbuf, unsigned char *codes, float *scale,
                         int *is_signed);
/* The code of one weight, counting the midpoints one by one: the plain
 * reference the tests compare al_explore_quantise with. */
unsigned char al_explore_code_ref(float w, float scale, int is_signed);
/* The weight a code stands for (the page's decoder does the same). */
float al_explore_dequantise(unsigned char code, float scale, int is_signed);

/* The map's text line (no newline) into out (al_explore_map_line_cap bytes
 * plus 1); returns its length. */
size_t al_explore_map_line(const unsigned char *codes, size_t n, float scale, int is_signed, int f, char *out);

/* Standard base64 (RFC 4648, padded) of n bytes into out, 4 ceil(n / 3)
 * characters (no NUL); returns that count. */
size_t al_base64_encode(const unsigned char *in, size_t n, char *out);

/* float32 values as little-endian bytes, whatever the host's order. */
void al_f32_to_le(const float *v, size_t n, unsigned char *out);

#endif
