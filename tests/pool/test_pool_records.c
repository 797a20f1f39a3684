/* The pool library without etcd: JSON reading and writing, member records both ways,
 * and the HTTP client's error for an endpoint nobody listens on. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "json.h"
#include "placement.h"
#include "pool.h"

static int failures;

#define EXPECT(cond)                                                                      \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                       \
		}                                                                         \
	} while (0)

static void test_json(void)
{
	const char *text = "{\"a\": \"x\\\"y\\u00e9\", \"n\": 42, \"s\": \"-7\", \"arr\": [1, true, null, {}],"
			   " \"big\": \"9223372036854775807\"}";
	struct rm_json *j = rm_json_parse(text, strlen(text));
	EXPECT(j != NULL);
	EXPECT(j && !strcmp(rm_json_str(j, "a"), "x\"y\xc3\xa9"));
	EXPECT(rm_json_int(j, "n", 0) == 42);
	EXPECT(rm_json_int(j, "s", 0) == -7);
	EXPECT(rm_json_int(j, "big", 0) == INT64_MAX);
	EXPECT(rm_json_int(j, "a", 5) == 5);
	EXPECT(rm_json_int(j, "missing", 3) == 3);
	const struct rm_json *arr = rm_json_get(j, "arr");
	EXPECT(arr && arr->type == RM_JSON_ARRAY && arr->child && arr->child->next->type == RM_JSON_BOOL);
	rm_json_free(j);

	static const char *bad[] = {"", "{", "{\"a\":}", "[1,]", "{\"a\" 1}", "\"\x01\"", "[1] x", "tru",
				    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct rm_json *b = rm_json_parse(bad[i], strlen(bad[i]));
		if (b)
			fprintf(stderr, "accepted malformed JSON #%zu\n", i);
		EXPECT(b == NULL);
		rm_json_free(b);
	}
}

static void test_member_round_trip(void)
{
	struct rm_pool_member m = {0}, back;
	snprintf(m.host, sizeof(m.host), "gpu\"host");
	snprintf(m.address, sizeof(m.address), "tcp://10.0.0.1:7700");
	snprintf(m.state, sizeof(m.state), "draining");
	m.clients = 3;
	m.pid = 1234;
	m.updated = 1700000000;
	m.ngpus = 2;
	for (int i = 0; i < 2; i++) {
		m.gpus[i].index = i;
		snprintf(m.gpus[i].name, sizeof(m.gpus[i].name), "GPU %d", i);
		snprintf(m.gpus[i].uuid, sizeof(m.gpus[i].uuid), "GPU-0000000%d", i);
		m.gpus[i].total_bytes = 80ull << 30;
		m.gpus[i].free_bytes = (uint64_t)(10 + i) << 30;
		m.gpus[i].clients = i + 1;
	}
	char *json = rm_pool_member_json(&m);
	EXPECT(json != NULL);
	EXPECT(json && rm_pool_member_parse(json, &back) == 0);
	EXPECT(!strcmp(back.host, m.host) && !strcmp(back.address, m.address) && !strcmp(back.state, "draining"));
	EXPECT(back.clients == 3 && back.pid == 1234 && back.updated == 1700000000 && back.ngpus == 2);
	EXPECT(back.gpus[1].free_bytes == 11ull << 30 && back.gpus[1].clients == 2 && !strcmp(back.gpus[1].uuid, "GPU-00000001"));
	EXPECT(rm_pool_max_free(&back) == 11ull << 30);
	EXPECT(!strcmp(rm_pool_state(&back), "draining"));
	snprintf(back.admin, sizeof(back.admin), "removed");
	EXPECT(!strcmp(rm_pool_state(&back), "removed"));
	EXPECT(rm_pool_member_parse("{\"host\":1}", &back) == -EPROTO);
	free(json);
}

static void test_http_refused(void)
{
	/* A port bound but not listening refuses connections. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	EXPECT(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	char endpoint[64];
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
	int status;
	char *reply;
	EXPECT(rm_http_post(endpoint, "/v3/kv/range", "{}", 1000, &status, &reply) == -ECONNREFUSED);
	EXPECT(rm_http_post("ftp://x:1", "/", "{}", 1000, &status, &reply) == -EINVAL);
	EXPECT(rm_http_post("http://nohostport", "/", "{}", 1000, &status, &reply) == -EINVAL);
	close(fd);
	struct rm_etcd e;
	EXPECT(rm_etcd_init(&e, " , ") == -EINVAL);
	EXPECT(rm_etcd_init(&e, endpoint) == 0);
	char *v;
	EXPECT(rm_etcd_get(&e, "/x", &v) == -ECONNREFUSED);
	EXPECT(strstr(e.error, "cannot reach etcd at") != NULL);
}

static void member(struct rm_pool_member *m, const char *host, const char *state, int clients, uint64_t free_mib)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->host, sizeof(m->host), "%s", host);
	snprintf(m->state, sizeof(m->state), "%s", state);
	m->registered = 1;
	m->clients = clients;
	m->ngpus = 1;
	m->gpus[0].total_bytes = 8192ull << 20;
	m->gpus[0].free_bytes = free_mib << 20;
}

static void test_placement_order(void)
{
	struct rm_pool_member m[6];
	member(&m[0], "a", "serving", 2, 4000);
	member(&m[1], "b", "serving", 0, 1000);
	member(&m[2], "c", "serving", 0, 3000);
	member(&m[3], "d", "draining", 0, 8000);
	member(&m[4], "e", "serving", 0, 8000);
	snprintf(m[4].admin, sizeof(m[4].admin), "draining"); /* decided, not yet mirrored */
	member(&m[5], "f", "serving", 1, 3000);
	int order[6];
	int n = rm_placement_order(m, 6, 0, order);
	EXPECT(n == 4 && order[0] == 2 && order[1] == 1 && order[2] == 5 && order[3] == 0);
	n = rm_placement_order(m, 6, 2000ull << 20, order);
	EXPECT(n == 3 && order[0] == 2 && order[1] == 5 && order[2] == 0);
	m[1].registered = 0;
	n = rm_placement_order(m, 6, 0, order);
	EXPECT(n == 3 && order[0] == 2);
}

int main(void)
{
	test_json();
	test_member_round_trip();
	test_http_refused();
	test_placement_order();
	if (failures)
		fprintf(stderr, "test_pool_records: %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
