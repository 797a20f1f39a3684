/* Prometheus metrics (docs/operations.md): a small HTTP responder in the accepting process
 * answering GET /metrics on metrics_listen with the registry's figures in the text
 * exposition format. One thread, non-blocking sockets under poll(), bounded: at most
 * RM_METRICS_MAX_CONNS connections, a request of at most RM_METRICS_MAX_REQUEST bytes
 * that must be whole within RM_METRICS_REQUEST_MS, and RM_METRICS_TIMEOUT_MS for a
 * connection's whole life. With every place taken, a new connection takes the place of the
 * oldest one still waiting for its request (one being answered keeps its place; with none
 * waiting, the new one is closed at once): idle connections cannot keep a scraper out. */
#ifndef REMORA_METRICS_H
#define REMORA_METRICS_H

#include <stddef.h>

#include "config.h"
#include "snapshot.h"

#define RM_METRICS_MAX_CONNS 16
#define RM_METRICS_MAX_REQUEST 4096
#define RM_METRICS_TIMEOUT_MS 5000
#define RM_METRICS_REQUEST_MS 2000

/* Listens on cfg->metrics_listen and starts the responder thread (its signals blocked by
 * the caller): 0, or -errno after a log line. Nothing when metrics_listen is empty. */
int rm_metrics_start(const struct rm_daemon_config *cfg);

/* The HTTP status a request head (len bytes, up to its blank line) gets: 200 for GET or
 * HEAD of /metrics, 404 another path, 405 another method, 400 a malformed request line.
 * *head_only is set for HEAD. */
int rm_metrics_request_status(const char *req, size_t len, int *head_only);

/* The exposition text of snapshot s: a malloc'd string of *len bytes, or NULL. */
char *rm_metrics_render(const struct rm_snapshot *s, const struct rm_daemon_config *cfg, const char *host,
			size_t *len);

#endif
