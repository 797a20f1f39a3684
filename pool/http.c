/* HTTP/1.1 over one TCP socket: connect with a deadline, send the request with
 * "Connection: close", read until the server closes, then take the reply apart. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd is ready for events or the deadline passes. */
static int wait_fd(int fd, short events, long long deadline)
{
	for (;;) {
		long long left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Splits "http://host:port" (or "host:port", "[v6]:port") into host and port. */
static int split_endpoint(const char *endpoint, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *s = endpoint;
	if (!strncmp(s, "http://", 7))
		s += 7;
	else if (strstr(s, "://"))
		return -EINVAL;
	const char *colon;
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		if ((size_t)(close - s - 1) >= hostlen)
			return -EINVAL;
		snprintf(host, hostlen, "%.*s", (int)(close - s - 1), s + 1);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || colon == s || (size_t)(colon - s) >= hostlen)
			return -EINVAL;
		snprintf(host, hostlen, "%.*s", (int)(colon - s), s);
	}
	size_t plen = strcspn(colon + 1, "/");
	if (!plen || plen >= portlen)
		return -EINVAL;
	snprintf(port, portlen, "%.*s", (int)plen, colon + 1);
	return 0;
}

static int dial(const char *host, const char *port, long long deadline, int *out)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	if (getaddrinfo(host, port, &hints, &res))
		return -EHOSTUNREACH;
	int err = -EHOSTUNREACH;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
		    (errno == EINPROGRESS && (err = wait_fd(fd, POLLOUT, deadline)) == 0)) {
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
			if (!soerr) {
				freeaddrinfo(res);
				*out = fd;
				return 0;
			}
			err = -soerr;
		} else if (errno != EINPROGRESS) {
			err = -errno;
		}
		close(fd);
	}
	freeaddrinfo(res);
	return err;
}

static int send_all(int fd, const char *p, size_t len, long long deadline)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			int err = wait_fd(fd, POLLOUT, deadline);
			if (err)
				return err;
		} else {
			return n < 0 ? -errno : -EPIPE;
		}
	}
	return 0;
}

/* Reads until the peer closes; *out holds the bytes, NUL-terminated. */
static int read_all(int fd, long long deadline, char **out, size_t *outlen)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len + 1 == cap) {
			if (cap > RM_HTTP_MAX_REPLY + 65536) {
				free(buf);
				return -EMSGSIZE;
			}
			char *p = realloc(buf, cap * 2);
			if (!p) {
				free(buf);
				return -ENOMEM;
			}
			buf = p;
			cap *= 2;
		}
		ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
		if (n > 0) {
			len += (size_t)n;
		} else if (n == 0) {
			break;
		} else if (errno == EAGAIN || errno == EINTR) {
			int err = wait_fd(fd, POLLIN, deadline);
			if (err) {
				free(buf);
				return err;
			}
		} else {
			int err = -errno;
			free(buf);
			return err;
		}
	}
	buf[len] = 0;
	*out = buf;
	*outlen = len;
	return 0;
}

/* Removes chunked transfer coding from body in place; returns the decoded length or -EPROTO. */
static long dechunk(char *body, size_t len)
{
	size_t in = 0, out = 0;
	for (;;) {
		char *end;
		unsigned long n = strtoul(body + in, &end, 16);
		if (end == body + in)
			return -EPROTO;
		char *eol = strstr(end, "\r\n");
		if (!eol)
			return -EPROTO;
		in = (size_t)(eol + 2 - body);
		if (n == 0)
			return (long)out; /* trailers, if any, are ignored */
		if (n > len - in)
			return -EPROTO;
		memmove(body + out, body + in, n);
		out += n;
		in += n;
		if (len - in < 2 || memcmp(body + in, "\r\n", 2))
			return -EPROTO;
		in += 2;
	}
}

/* Takes apart a whole reply: status line, headers, body. */
static int parse_reply(char *raw, size_t len, int *status, char **reply)
{
	char *hdr_end = strstr(raw, "\r\n\r\n");
	if (!hdr_end || sscanf(raw, "HTTP/1.%*d %d", status) != 1)
		return -EPROTO;
	*hdr_end = 0;
	char *body = hdr_end + 4;
	size_t blen = len - (size_t)(body - raw);
	int chunked = 0;
	long content_length = -1;
	for (char *line = strstr(raw, "\r\n"); line; line = strstr(line, "\r\n")) {
		line += 2;
		if (!strncasecmp(line, "Content-Length:", 15))
			content_length = strtol(line + 15, NULL, 10);
		else if (!strncasecmp(line, "Transfer-Encoding:", 18) && strstr(line, "chunked"))
			chunked = 1;
	}
	if (chunked) {
		long n = dechunk(body, blen);
		if (n < 0)
			return (int)n;
		blen = (size_t)n;
	} else if (content_length >= 0) {
		if ((size_t)content_length > blen)
			return -EPROTO;
		blen = (size_t)content_length;
	}
	if (blen > RM_HTTP_MAX_REPLY)
		return -EMSGSIZE;
	*reply = malloc(blen + 1);
	if (!*reply)
		return -ENOMEM;
	memcpy(*reply, body, blen);
	(*reply)[blen] = 0;
	return 0;
}

int rm_http_post(const char *endpoint, const char *path, const char *body, int timeout_ms, int *status,
		 char **reply)
{
	char host[256], port[16];
	int err = split_endpoint(endpoint, host, sizeof(host), port, sizeof(port));
	if (err)
		return err;
	long long deadline = now_ms() + timeout_ms;
	int fd = -1;
	if ((err = dial(host, port, deadline, &fd)))
		return err;
	size_t blen = strlen(body);
	char head[512];
	int hl = snprintf(head, sizeof(head),
			  "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			  path, host, port, blen);
	char *raw = NULL;
	size_t rawlen = 0;
	if (hl < 0 || (size_t)hl >= sizeof(head))
		err = -EINVAL;
	if (!err)
		err = send_all(fd, head, (size_t)hl, deadline);
	if (!err)
		err = send_all(fd, body, blen, deadline);
	if (!err)
		err = read_all(fd, deadline, &raw, &rawlen);
	if (!err)
		err = parse_reply(raw, rawlen, status, reply);
	free(raw);
	close(fd);
	return err;
}
