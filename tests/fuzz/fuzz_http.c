/* Fuzz target `http`: how pool/http.c reads and takes apart the reply an etcd
 * endpoint sends. Both steps are static, reached only through rm_http_post's socket,
 * so http.c is compiled into this file: the input is written by a thread into one end
 * of a socketpair, then read_all() reads the other end and parse_reply() parses it,
 * as rm_http_post does after its request. A parsed body is NUL-terminated and no longer
 * than what was read. */
#include "http.c"

#include <pthread.h>

struct peer {
	int fd;
	const uint8_t *data;
	size_t size;
};

static void *send_reply(void *arg)
{
	struct peer *p = arg;
	for (size_t off = 0; off < p->size;) {
		ssize_t n = send(p->fd, p->data + off, p->size - off, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(p->fd); /* the server closes after its reply */
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fds[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
		return 0;
	struct peer p = {fds[1], data, size};
	pthread_t t;
	if (pthread_create(&t, NULL, send_reply, &p)) {
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	char *raw = NULL, *reply = NULL;
	size_t rawlen = 0;
	int status = 0;
	if (read_all(fds[0], now_ms() + 10000, &raw, &rawlen) == 0) {
		if (rawlen != size || raw[rawlen])
			abort();
		if (parse_reply(raw, rawlen, &status, &reply) == 0) {
			if (strlen(reply) > rawlen)
				abort();
			free(reply);
		}
		free(raw);
	}
	pthread_join(t, NULL);
	close(fds[0]);
	return 0;
}
