/*
 * http_server.c: the poll-loop HTTP server of http_server.h.
 *
 * Each connection walks READ (collect the request head) -> WRITE (send the
 * reply: status line, headers, body) -> closed. Replies always say
 * "Connection: close": one request per connection keeps the state machine
 * this small, and on the loopback a new connection costs microseconds.
 */
#define _GNU_SOURCE
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { CONN_FREE, CONN_READ, CONN_WRITE };

typedef struct al_http_conn {
    int fd, state;
    char req[AL_HTTP_MAX_REQUEST + 2]; /* one byte past the limit, and the NUL */
    size_t req_len;
    char *out;              /* head and body of the reply */
    size_t out_len, out_sent;
    double last;            /* seconds: last activity */
} al_http_conn;

/* Monotonic seconds. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
    }
}

int al_http_text(al_http_reply *reply, int status, const char *type, const char *text) {
    reply->status = status;
    reply->type = type ? type : "text/plain; charset=utf-8";
    reply->len = strlen(text);
    reply->body = malloc(reply->len + 1);
    if (!reply->body) return -1;
    memcpy(reply->body, text, reply->len + 1);
    return 0;
}

const char *al_http_query(const al_http_request *req, const char *name) {
    for (int i = 0; i < req->n_query; i++)
        if (!strcmp(req->query_name[i], name)) return req->query_value[i];
    return NULL;
}

/* Closes the connection's socket and frees its reply; the slot is free again. */
static void conn_close(al_http_conn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->out);
    c->out = NULL;
    c->fd = -1;
    c->state = CONN_FREE;
}

/* Turns a connection into WRITE with the reply (its body is taken over);
 * HEAD sends the head only. A failed allocation drops the connection. */
static void set_reply(al_http_conn *c, al_http_reply *r, int head_only) {
    char head[512];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                     "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
                     "\r\n",
                     r->status, reason(r->status), r->type ? r->type : "text/plain; charset=utf-8", r->len);
    size_t body = head_only ? 0 : r->len;
    c->out = malloc((size_t)n + body);
    if (c->out) {
        memcpy(c->out, head, (size_t)n);
        if (body) memcpy(c->out + n, r->body, body);
    }
    free(r->body);
    r->body = NULL;
    c->out_len = c->out ? (size_t)n + body : 0;
    c->out_sent = 0;
    c->state = CONN_WRITE;
    if (!c->out) conn_close(c);
}

/* A short text reply (errors). */
static void reply_status(al_http_conn *c, int status, const char *text) {
    al_http_reply r = {0};
    if (al_http_text(&r, status, NULL, text))
        conn_close(c);
    else
        set_reply(c, &r, 0);
}

/* The value of header `name` in the request head (lines after the first),
 * copied into buf; 1 if present. */
static int header(const char *head, const char *name, char *buf, size_t cap) {
    size_t n = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (!strncasecmp(line, name, n) && line[n] == ':') {
            const char *v = line + n + 1, *e = strstr(v, "\r\n");
            while (*v == ' ' || *v == '\t') v++;
            size_t len = e ? (size_t)(e - v) : strlen(v);
            while (len && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
            if (len >= cap) len = cap - 1;
            memcpy(buf, v, len);
            buf[len] = 0;
            return 1;
        }
    }
    return 0;
}

/* Constant-time comparison of the token (its length is public). */
static int token_ok(const char *given, const char *token) {
    if (!given || strlen(given) != strlen(token)) return 0;
    unsigned char d = 0;
    for (size_t i = 0; token[i]; i++) d |= (unsigned char)(given[i] ^ token[i]);
    return d == 0;
}

int al_http_answer(al_http_server *s, char *req, al_http_reply *reply, int *head_only) {
    char value[256];
    memset(reply, 0, sizeof *reply);
    *head_only = 0;
    char *sp1 = strchr(req, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL, *eol = strstr(req, "\r\n");
    if (!sp1 || !sp2 || !eol || sp2 > eol || strncmp(sp2 + 1, "HTTP/1.", 7))
        return al_http_text(reply, 400, NULL, "bad request line\n");
    *sp1 = 0;
    *sp2 = 0;
    *head_only = !strcmp(req, "HEAD"); /* from here on, refusals to HEAD send their head only too */
    if (strcmp(req, "GET") && !*head_only) return al_http_text(reply, 405, NULL, "only GET and HEAD\n");
    const char *headers = eol; /* "\r\n" and the header lines */
    if ((header(headers, "Content-Length", value, sizeof value) && strcmp(value, "0")) ||
        header(headers, "Transfer-Encoding", value, sizeof value))
        return al_http_text(reply, 413, NULL, "requests carry no body\n");
    if (!header(headers, "Host", value, sizeof value) || strcmp(value, s->host))
        return al_http_text(reply, 403, NULL, "wrong Host: this server answers only to its own address\n");
    al_http_request r = {.path = sp1 + 1};
    char *q = strchr(sp1 + 1, '?'), *save = NULL;
    if (q) {
        *q++ = 0;
        for (char *kv = strtok_r(q, "&", &save); kv && r.n_query < AL_HTTP_MAX_QUERY; kv = strtok_r(NULL, "&", &save)) {
            char *eq = strchr(kv, '=');
            if (eq) *eq = 0;
            r.query_name[r.n_query] = kv;
            r.query_value[r.n_query++] = eq ? eq + 1 : "";
        }
    }
    if (!strcmp(r.path, "/favicon.ico")) /* browsers ask on their own, without the token: nothing to give */
        return al_http_text(reply, 204, NULL, "");
    if (!token_ok(al_http_query(&r, "token"), s->token))
        return al_http_text(reply, 403, NULL, "missing or wrong token: open the address the program printed\n");
    if (s->handler(s->ctx, &r, reply)) {
        free(reply->body);
        return al_http_text(reply, 500, NULL, "out of memory\n");
    }
    s->served++;
    return 0;
}

/* The request head is complete in c->req: answer it, or drop the connection
 * when not even a refusal could be allocated. */
static void handle(al_http_server *s, al_http_conn *c) {
    al_http_reply reply;
    int head_only;
    if (al_http_answer(s, c->req, &reply, &head_only)) {
        conn_close(c);
        return;
    }
    set_reply(c, &reply, head_only);
}

/* Takes one token from the rate limiter's bucket; 0 when empty. */
static int rate_ok(al_http_server *s) {
    double t = now_s();
    s->bucket += (t - s->bucket_time) * AL_HTTP_RATE;
    if (s->bucket > AL_HTTP_BURST) s->bucket = AL_HTTP_BURST;
    s->bucket_time = t;
    if (s->bucket < 1) return 0;
    s->bucket -= 1;
    return 1;
}

/* New connections: a free slot each (else 503), non-blocking. */
static void accept_all(al_http_server *s) {
    for (;;) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        al_http_conn *c = NULL;
        for (int i = 0; i < AL_HTTP_MAX_CONN && !c; i++)
            if (s->conns[i].state == CONN_FREE) c = &s->conns[i];
        if (!c) {
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            ssize_t w = write(fd, busy, sizeof busy - 1);
            (void)w;
            close(fd);
            s->refused++;
            continue;
        }
        c->fd = fd;
        c->state = CONN_READ;
        c->req_len = 0;
        c->last = now_s();
    }
}

/* Reads what the client sent; once the head is complete, answers it. */
static void read_conn(al_http_server *s, al_http_conn *c) {
    ssize_t n = read(c->fd, c->req + c->req_len, AL_HTTP_MAX_REQUEST + 1 - c->req_len);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
        return;
    }
    if (n < 0) return;
    c->req_len += (size_t)n;
    c->req[c->req_len] = 0;
    c->last = now_s();
    if (strstr(c->req, "\r\n\r\n")) {
        if (!rate_ok(s)) {
            s->refused++;
            reply_status(c, 429, "too many requests\n");
            return;
        }
        handle(s, c);
    } else if (c->req_len > AL_HTTP_MAX_REQUEST) {
        s->refused++;
        reply_status(c, 431, "request too large\n");
    }
}

static void write_conn(al_http_conn *c) {
    ssize_t n = write(c->fd, c->out + c->out_sent, c->out_len - c->out_sent);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        conn_close(c);
        return;
    }
    c->out_sent += (size_t)n;
    c->last = now_s();
    if (c->out_sent == c->out_len) {
        shutdown(c->fd, SHUT_WR);
        conn_close(c);
    }
}

int al_http_open(al_http_server *s, int port, al_http_handler handler, void *ctx, al_err *err) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (port < 0 || port > 65535) return al_errf(err, "port %d out of range (0..65535)", port);
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return al_errf(err, "no random bytes for the access token: %s", strerror(errno));
    for (int i = 0; i < 16; i++) snprintf(s->token + 2 * i, 3, "%02x", rnd[i]);
    s->conns = calloc(AL_HTTP_MAX_CONN, sizeof *s->conns);
    if (!s->conns) return al_errf(err, "out of memory");
    for (int i = 0; i < AL_HTTP_MAX_CONN; i++) s->conns[i].fd = -1;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s->fd, (struct sockaddr *)&a, sizeof a) || listen(s->fd, 64) ||
        getsockname(s->fd, (struct sockaddr *)&a, &alen)) {
        int e = errno;
        al_http_close(s);
        return al_errf(err, "cannot listen on 127.0.0.1:%d: %s", port, strerror(e));
    }
    s->port = ntohs(a.sin_port);
    snprintf(s->host, sizeof s->host, "127.0.0.1:%d", s->port);
    s->handler = handler;
    s->ctx = ctx;
    s->bucket = AL_HTTP_BURST;
    s->bucket_time = now_s();
    return 0;
}

int al_http_serve(al_http_server *s, volatile sig_atomic_t *stop, al_err *err) {
    struct pollfd p[AL_HTTP_MAX_CONN + 1];
    int idx[AL_HTTP_MAX_CONN + 1];
    while (!*stop) {
        int n = 0;
        p[n].fd = s->fd;
        p[n].events = POLLIN;
        idx[n++] = -1;
        double t = now_s();
        for (int i = 0; i < AL_HTTP_MAX_CONN; i++) {
            al_http_conn *c = &s->conns[i];
            if (c->state == CONN_FREE) continue;
            if (t - c->last > AL_HTTP_IDLE_MS / 1000.0) {
                conn_close(c);
                continue;
            }
            p[n].fd = c->fd;
            p[n].events = c->state == CONN_READ ? POLLIN : POLLOUT;
            idx[n++] = i;
        }
        int r = poll(p, (nfds_t)n, 200);
        if (r < 0) {
            if (errno == EINTR) continue;
            return al_errf(err, "poll: %s", strerror(errno));
        }
        for (int j = 0; j < n && r > 0; j++) {
            if (!p[j].revents) continue;
            if (idx[j] < 0) {
                accept_all(s);
                continue;
            }
            al_http_conn *c = &s->conns[idx[j]];
            if (c->state == CONN_READ) read_conn(s, c);
            else if (c->state == CONN_WRITE) write_conn(c);
        }
    }
    for (int i = 0; i < AL_HTTP_MAX_CONN; i++) conn_close(&s->conns[i]);
    return 0;
}

void al_http_close(al_http_server *s) {
    if (s->conns)
        for (int i = 0; i < AL_HTTP_MAX_CONN; i++) conn_close(&s->conns[i]);
    free(s->conns);
    s->conns = NULL;
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}
