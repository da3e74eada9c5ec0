/*
 * explore_serve.h: the routes of `attnlab explore --serve` (docs/explore.md):
 * after one forward over the text, heads are recomputed on request from the
 * rotated queries and keys the forward kept (al_attnmap_weights: one T x T
 * product and the score function, milliseconds), so the server holds O(L T)
 * activations and one T x T head, whatever L, H and T.
 *
 *   /?token=            the page (the single file's page with no weights)
 *   /api/map?layer&head the head's display map, quantised (explore_maps.h line)
 *   /api/row?layer&head&q  query q's exact float32 weights over keys 0..q
 *                       (0..T-1 bidirectional), base64 little-endian
 *   /api/layer?layer    JSON {"layer", "stats": [H objects], "thumbs": [H
 *                       map lines at the thumbnail factor]}; computed once
 *                       per layer, then kept (small)
 * Bad or missing parameters are 400, unknown paths 404 (http_server.h checks
 * Host, token, size and rate before any of this).
 *
 * Data structure: the server context keeps the model and its forward
 * activations, the page text, the last head computed (P, which /api/row
 * reuses), a per-layer cache of the /api/layer replies, and the buffers one
 * map needs, all allocated up front.
 */
#ifndef AL_EXPLORE_SERVE_H
#define AL_EXPLORE_SERVE_H

#include "../io/http_server.h"
#include "attnmap.h"

typedef struct al_explore_server {
    const al_model *m;
    const al_acts *a;
    int T, L, H, causal, topk;
    int factor, thumb_factor;    /* display maps and thumbnails (explore_maps.h) */
    char *page;                  /* the page's text */
    size_t page_len;
    float *P;                    /* [T * T]: the last head computed */
    int P_layer, P_head;         /* which (-1: none) */
    float *rowbuf;               /* [D] */
    unsigned char *codes;        /* [map cells] */
    char **layer_reply;          /* [L]: the /api/layer JSON once computed */
    double first_map_s;          /* seconds the first /api/map took (0 until then) */
    double last_map_s;           /* seconds the last /api/map took */
    double last_layer_s;         /* seconds the last computed /api/layer took */
} al_explore_server;

/* Takes the model and its forward (kept by the caller until
 * al_explore_server_free) and the page text (taken over, freed with the
 * server). factor: display factor of the maps; thumb_factor: of the
 * thumbnails. Returns 0 or -1 with one line in err. */
int al_explore_server_init(al_explore_server *s, const al_model *m, const al_acts *a, int topk, int factor,
                           int thumb_factor, char *page, size_t page_len, al_err *err);
void al_explore_server_free(al_explore_server *s);

/* The al_http_handler of the routes above; ctx is the al_explore_server. */
int al_explore_server_handle(void *ctx, const al_http_request *req, al_http_reply *reply);

#endif
