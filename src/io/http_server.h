/*
 * http_server.h: a small HTTP/1.1 server for local tools (`attnlab explore
 * --serve`): one thread, one poll loop, one request per connection.
 *
 * It is built for a page that talks to its own program on the same machine,
 * and refuses everything else (docs/explore.md, "Security"):
 *   - it listens on 127.0.0.1 only;
 *   - the Host header must be exactly the address it listens on
 *     ("127.0.0.1:PORT"), so a page on another site that rebinds its DNS name
 *     to 127.0.0.1 is refused (403);
 *   - requests are GET or HEAD (else 405) without a body (413), and their head
 *     (request line and headers) fits in AL_HTTP_MAX_REQUEST bytes (else 431);
 *     a client that sends nothing for AL_HTTP_IDLE_MS is dropped;
 *   - every route needs `token=` in its query equal to the server's random
 *     token (else 403), so only whoever holds the printed URL gets data;
 *     /favicon.ico, which browsers request on their own, is an empty 204;
 *   - at most AL_HTTP_RATE requests per second on average (bursts of
 *     AL_HTTP_BURST), the rest get 429; at most AL_HTTP_MAX_CONN connections;
 *   - the request path is only ever compared with the handler's route names:
 *     no file is opened from it ('..' or any unknown path is 404).
 * al_http_serve returns when *stop becomes non-zero (a signal handler sets
 * it), after closing every socket.
 *
 * Data structure: the server owns the listening socket and a fixed table of
 * connections, each with its request buffer (read until the blank line) and
 * then its reply buffer (written until done, then closed).
 */
#ifndef AL_HTTP_SERVER_H
#define AL_HTTP_SERVER_H

#include <signal.h>
#include <stddef.h>

#include "../core/core.h"

enum {
    AL_HTTP_MAX_REQUEST = 8192, /* bytes of request line plus headers */
    AL_HTTP_MAX_CONN = 64,
    AL_HTTP_IDLE_MS = 10000,
    AL_HTTP_RATE = 200,  /* requests per second, sustained */
    AL_HTTP_BURST = 400, /* requests at once */
    AL_HTTP_MAX_QUERY = 16
};

/* A request as the handler sees it: the path (without the query) and the
 * query's name=value pairs, undecoded (the routes only take digits). */
typedef struct al_http_request {
    const char *path;
    int n_query;
    const char *query_name[AL_HTTP_MAX_QUERY], *query_value[AL_HTTP_MAX_QUERY];
} al_http_request;

/* The handler's answer: status, content type and a malloc'd body that the
 * server frees when sent. */
typedef struct al_http_reply {
    int status;
    const char *type;
    char *body;
    size_t len;
} al_http_reply;

/* Answers one request (token and Host already checked). Returns 0 with
 * *reply filled, or -1 when out of memory (the client gets 500). */
typedef int (*al_http_handler)(void *ctx, const al_http_request *req, al_http_reply *reply);

typedef struct al_http_server {
    int fd;                 /* listening socket */
    int port;
    char host[32];          /* "127.0.0.1:PORT", the only Host accepted */
    char token[33];         /* 32 hex digits */
    al_http_handler handler;
    void *ctx;
    struct al_http_conn *conns; /* [AL_HTTP_MAX_CONN] */
    double bucket, bucket_time; /* rate limiter: tokens left, when last filled (seconds) */
    long served;            /* requests the handler answered */
    long refused;           /* requests refused for rate (429), size (431) or connections (503) */
} al_http_server;

/* Binds 127.0.0.1:port (0: a free port the system picks; s->port says
 * which) and draws the random token. Returns 0 or -1 with one line in err. */
int al_http_open(al_http_server *s, int port, al_http_handler handler, void *ctx, al_err *err);

/* Serves until *stop is non-zero (checked at least every 200 ms), then
 * closes every connection. Returns 0, or -1 with one line in err if poll
 * fails for a reason other than a signal. */
int al_http_serve(al_http_server *s, volatile sig_atomic_t *stop, al_err *err);

/* Closes the listening socket and frees the server; safe after a failed open. */
void al_http_close(al_http_server *s);

/* Answers one complete request head (request line and headers up to the
 * blank line, NUL-terminated; split in place): checks it against the rules
 * above (405, 413, 403, the bad request line 400, /favicon.ico's 204) and
 * only then calls s->handler, counting it in s->served. Fills *reply (the
 * caller frees reply->body) and *head_only (HEAD: send the head only).
 * Returns 0, or -1 when not even a refusal's text could be allocated. The
 * poll loop calls it; tests/fuzz/http.c calls it without sockets. */
int al_http_answer(al_http_server *s, char *req, al_http_reply *reply, int *head_only);

/* The value of query parameter `name`, or NULL. */
const char *al_http_query(const al_http_request *req, const char *name);

/* Fills reply with a copy of text (status, type "text/plain; charset=utf-8"
 * unless type is given). Returns 0 or -1 when out of memory. */
int al_http_text(al_http_reply *reply, int status, const char *type, const char *text);

#endif
