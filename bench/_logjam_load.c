/* The logjam bench's load generator and subscriber, in C so that neither is what limits the server it measures
 * (a Python producer was: logjam-device took all it offered). bench/logjam.py builds it with cc and libzmq.
 *
 *   _logjam_load produce ENDPOINT COUNT BODIES METHOD   a DEALER sends COUNT messages of the agent's 4 frames
 *       (app-env, topic, body, meta) without waiting, bodies taken in turn from the file BODIES (each a 4-byte
 *       big-endian length, then the body as compressed with METHOD, the meta's compression number); prints
 *       {"start": t, "sent_done": t} once every message is queued (its offered rate), then waits until all
 *       are on the wire.
 *   _logjam_load subscribe ENDPOINT COUNT TIMEOUT_MS    a SUB (bench-production) counts COUNT published
 *       messages; prints "ready" once connected, then {"received": n, "first": t, "last": t}.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <zmq.h>

#define MAX_BODIES 64
static const char APP_ENV[] = "bench-production";
static const char TOPIC[] = "logs.bench";

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static int fail(const char *what) {
    fprintf(stderr, "_logjam_load: %s: %s\n", what, zmq_strerror(zmq_errno()));
    return 1;
}

static int produce(void *ctx, const char *endpoint, long count, const char *path, int method) {
    static unsigned char *body[MAX_BODIES];
    static size_t size[MAX_BODIES];
    int bodies = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    unsigned char head[4];
    while (bodies < MAX_BODIES && fread(head, 1, 4, f) == 4) {
        size[bodies] = ((size_t)head[0] << 24) | ((size_t)head[1] << 16) | ((size_t)head[2] << 8) | head[3];
        body[bodies] = malloc(size[bodies] ? size[bodies] : 1);
        if (body[bodies] == NULL || fread(body[bodies], 1, size[bodies], f) != size[bodies]) {
            fprintf(stderr, "_logjam_load: %s: a truncated body\n", path);
            return 1;
        }
        bodies++;
    }
    fclose(f);
    if (bodies == 0) {
        fprintf(stderr, "_logjam_load: %s holds no body\n", path);
        return 1;
    }
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, forever = -1;
    zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof(zero));
    zmq_setsockopt(sock, ZMQ_LINGER, &forever, sizeof(forever));
    if (zmq_connect(sock, endpoint))
        return fail(endpoint);
    usleep(300000); /* the connection is up before the clock starts */
    struct timeval tv;
    gettimeofday(&tv, NULL);
    uint64_t created = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
    unsigned char meta[24];
    double start = now();
    for (long i = 0; i < count; i++) {
        int b = (int)(i % bodies);
        be(meta, 0xCABD, 2);
        meta[2] = (unsigned char)method;
        meta[3] = 1;
        be(meta + 4, 0, 4);
        be(meta + 8, created, 8);
        be(meta + 16, (uint64_t)i + 1, 8);
        if (zmq_send(sock, APP_ENV, sizeof(APP_ENV) - 1, ZMQ_SNDMORE) < 0
            || zmq_send(sock, TOPIC, sizeof(TOPIC) - 1, ZMQ_SNDMORE) < 0
            || zmq_send(sock, body[b], size[b], ZMQ_SNDMORE) < 0 || zmq_send(sock, meta, sizeof(meta), 0) < 0)
            return fail("send");
    }
    printf("{\"start\": %.6f, \"sent_done\": %.6f}\n", start, now());
    fflush(stdout);
    zmq_close(sock); /* linger -1: the context's end waits for every message to leave */
    return 0;
}

static int subscribe(void *ctx, const char *endpoint, long count, int timeout_ms) {
    void *sock = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_RCVHWM, &zero, sizeof(zero));
    zmq_setsockopt(sock, ZMQ_SUBSCRIBE, APP_ENV, sizeof(APP_ENV) - 1);
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    if (zmq_connect(sock, endpoint))
        return fail(endpoint);
    printf("ready\n");
    fflush(stdout);
    long n = 0;
    double first = 0, last = 0;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    while (n < count) {
        if (zmq_msg_recv(&msg, sock, 0) < 0)
            break; /* the timeout: what arrived is counted */
        if (!zmq_msg_more(&msg) && ++n == 1)
            first = now();
    }
    last = now();
    zmq_msg_close(&msg);
    printf("{\"received\": %ld, \"first\": %.6f, \"last\": %.6f}\n", n, first, last);
    fflush(stdout);
    int nolinger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &nolinger, sizeof(nolinger));
    zmq_close(sock);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "produce") == 0) {
        void *ctx = zmq_ctx_new();
        int rc = produce(ctx, argv[2], atol(argv[3]), argv[4], atoi(argv[5]));
        zmq_ctx_term(ctx);
        return rc;
    }
    if (argc == 5 && strcmp(argv[1], "subscribe") == 0) {
        void *ctx = zmq_ctx_new();
        int rc = subscribe(ctx, argv[2], atol(argv[3]), atoi(argv[4]));
        zmq_ctx_term(ctx);
        return rc;
    }
    fprintf(stderr, "usage: _logjam_load produce ENDPOINT COUNT BODIES METHOD | subscribe ENDPOINT COUNT TIMEOUT_MS\n");
    return 2;
}
