/* The pool library without etcd: checked JSON reads, member records both ways, the
 * etcd client's settings, and its errors for an endpoint nobody listens on. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "json_read.h"
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
			   " \"big\": \"9223372036854775807\", \"huge\": 92233720368547758070, \"nul\": \"a\\u0000b\","
			   " \"f\": 1.5, \"sx\": \"12x\"}\n";
	struct json_object *j = rm_json_parse(text, strlen(text));
	EXPECT(j != NULL);
	const char *a = rm_json_string(j, "a", 16);
	EXPECT(a && !strcmp(a, "x\"y\xc3\xa9"));
	EXPECT(rm_json_string(j, "a", 3) == NULL);     /* longer than asked for */
	EXPECT(rm_json_string(j, "nul", 16) == NULL);  /* a NUL inside */
	EXPECT(rm_json_string(j, "n", 16) == NULL);    /* not a string */
	EXPECT(rm_json_int(j, "n", 0) == 42);
	EXPECT(rm_json_int(j, "s", 0) == -7);
	EXPECT(rm_json_int(j, "big", 0) == INT64_MAX);
	EXPECT(rm_json_int(j, "huge", 3) == 3);
	EXPECT(rm_json_int(j, "f", 3) == 3);
	EXPECT(rm_json_int(j, "sx", 3) == 3);
	EXPECT(rm_json_int(j, "a", 5) == 5);
	EXPECT(rm_json_int(j, "missing", 3) == 3);
	struct json_object *arr = rm_json_member(j, "arr", json_type_array);
	EXPECT(arr && json_object_array_length(arr) == 4);
	EXPECT(rm_json_member(j, "arr", json_type_object) == NULL);
	EXPECT(rm_json_member(arr, "x", json_type_int) == NULL); /* not an object */
	json_object_put(j);

	/* json-c takes a raw control character in a string, and single quotes, even when
	 * strict: harmless, since a record's text is escaped before it is shown (text.h). */
	static const char *bad[] = {"", "{", "{\"a\":}", "[1,]", "{\"a\" 1}", "\"\x7f", "[1] x", "tru", "{\"a\":01}",
				    "[\"\xff\"]", "{} {}", "{}\0",
				    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len = strlen(bad[i]) + (i == 11); /* with its NUL */
		struct json_object *b = rm_json_parse(bad[i], len);
		if (b)
			fprintf(stderr, "accepted malformed JSON #%zu\n", i);
		EXPECT(b == NULL);
		json_object_put(b);
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

static void test_etcd_errors(void)
{
	/* A port bound but not listening refuses connections. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	EXPECT(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	char endpoint[64];
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
	struct rm_etcd e;
	EXPECT(rm_etcd_init(&e, " , ") == -EINVAL);
	EXPECT(rm_etcd_init(&e, "ftp://x:1") == -EINVAL);
	EXPECT(rm_etcd_init(&e, endpoint) == 0);
	char *v;
	EXPECT(rm_etcd_get(&e, "/x", &v) == -ECONNREFUSED);
	EXPECT(strstr(e.error, "cannot reach etcd at") != NULL);
	/* The same over https:// (nothing answers before TLS starts), and host:port alone. */
	EXPECT(rm_etcd_init(&e, endpoint + 7) == 0 && rm_etcd_get(&e, "/x", &v) == -ECONNREFUSED);
	char secure[80];
	snprintf(secure, sizeof(secure), "https://%s/", endpoint + 7);
	EXPECT(rm_etcd_init(&e, secure) == 0 && strlen(e.endpoints[0]) == strlen(secure) - 1); /* its '/' dropped */
	EXPECT(rm_etcd_get(&e, "/x", &v) == -ECONNREFUSED);
	close(fd);

	struct rm_etcd_credentials c = {.cert_file = "client.pem"};
	EXPECT(rm_etcd_set_credentials(&e, &c) == -EINVAL);
	c = (struct rm_etcd_credentials){.user = "remora"};
	EXPECT(rm_etcd_set_credentials(&e, &c) == -EINVAL && strstr(e.error, "no password"));
	/* A TLS file that cannot be read is said so before anything is sent. */
	c = (struct rm_etcd_credentials){.ca_file = "/nonexistent/ca.pem", .user = "remora", .password = "pw"};
	EXPECT(rm_etcd_set_credentials(&e, &c) == -ENOENT && strstr(e.error, "CA file"));
	c.ca_file[0] = 0;
	EXPECT(rm_etcd_set_credentials(&e, &c) == 0 && !strcmp(e.cred.password, "pw"));
	rm_etcd_close(&e);
	EXPECT(!e.cred.password[0] && !e.token[0]);

	char why[256], pw[16];
	EXPECT(rm_etcd_read_password("/nonexistent/pw", pw, sizeof(pw), why, sizeof(why)) == -ENOENT);
	char path[] = "/tmp/remora-pw-XXXXXX";
	int pfd = mkstemp(path);
	EXPECT(pfd >= 0 && write(pfd, "s3cret\nignored\n", 15) == 15);
	close(pfd);
	EXPECT(rm_etcd_read_password(path, pw, sizeof(pw), why, sizeof(why)) == 0 && !strcmp(pw, "s3cret"));
	EXPECT(rm_etcd_read_password(path, pw, 4, why, sizeof(why)) == -ENAMETOOLONG);
	setenv("REMORA_POOL_USER", "remora", 1);
	setenv("REMORA_POOL_PASSWORD_FILE", path, 1);
	setenv("REMORA_POOL_PASSWORD", "not-this-one", 1);
	EXPECT(rm_etcd_credentials_from_env(&c, why, sizeof(why)) == 0 && !strcmp(c.password, "s3cret"));
	unsetenv("REMORA_POOL_PASSWORD_FILE");
	EXPECT(rm_etcd_credentials_from_env(&c, why, sizeof(why)) == 0 && !strcmp(c.password, "not-this-one"));
	unsetenv("REMORA_POOL_PASSWORD");
	EXPECT(rm_etcd_credentials_from_env(&c, why, sizeof(why)) == -EINVAL && strstr(why, "REMORA_POOL_PASSWORD_FILE"));
	unsetenv("REMORA_POOL_USER");
	unlink(path);
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
	test_etcd_errors();
	test_placement_order();
	if (failures)
		fprintf(stderr, "test_pool_records: %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
