/* remora migrate CLIENT --to HOST [--server SRC]: asks the source remorad to move one of
 * its clients to another remorad (docs/pool.md, "Live migration"), as the admin
 * (REMORA_TOKEN or --token). The source answers once the client runs at the target, or
 * says why it did not move; the client then goes on where it was. */
#include "migrate.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link.h"
#include "text.h"
#include "transport.h"

#define DEFAULT_DAEMON "127.0.0.1:7700"
#define ANSWER_SLACK_MS 60000 /* beyond the wait for the client's call: the move itself */

struct move_result {
	int32_t result;
	char error[256];
	uint64_t session, bytes, pause_us;
};

/* Sends the request and reads the answer: 0, or -errno with why said. */
static int ask(const char *from, uint64_t session, const char *to, const char *token, unsigned wait_s,
	       struct move_result *out, char *why, size_t n)
{
	const char *hostport;
	const struct rm_transport *tp = rm_transport_for(from, &hostport);
	if (!tp)
		return snprintf(why, n, "%s names an unknown transport", from), -EINVAL;
	struct rm_conn *conn;
	int err = tp->dial(hostport, 5000, &conn);
	if (err)
		return snprintf(why, n, "cannot reach remorad at %s: %s", from, rm_transport_why(err)), err;
	struct rm_link l;
	int timeout = (int)(wait_s ? wait_s : 30) * 1000 + ANSWER_SLACK_MS;
	rm_conn_set_liveness(conn, timeout, timeout);
	if ((err = rm_link_init(&l, conn))) {
		rm_conn_close(conn);
		return snprintf(why, n, "out of memory"), err;
	}
	Remora__MigrateRequest req = REMORA__MIGRATE_REQUEST__INIT;
	req.session_id = session;
	req.target = (char *)to;
	req.wait_s = wait_s;
	if (token) {
		req.credential.data = (uint8_t *)token;
		req.credential.len = strlen(token);
	}
	uint8_t buf[1024];
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MIGRATE, .seq = 1}, rf;
	size_t len = remora__migrate_request__get_packed_size(&req);
	Remora__MigrateReply *rep = NULL;
	if (len > sizeof(buf)) {
		err = -E2BIG;
		snprintf(why, n, "request too long");
		goto out;
	}
	f.msg_len = (uint32_t)remora__migrate_request__pack(&req, buf);
	if ((err = rm_link_send(&l, &f, buf, NULL, 0)) || (err = rm_link_read_frame(&l, &rf))) {
		snprintf(why, n, "no answer from remorad at %s: %s", from, strerror(-err));
		goto out;
	}
	if (rf.op != RM_OP_MIGRATE || rf.bulk_len || rf.msg_len > sizeof(buf) || (err = rm_link_read(&l, buf, rf.msg_len)) ||
	    !(rep = remora__migrate_reply__unpack(NULL, rf.msg_len, buf))) {
		err = err ? err : -EPROTO;
		snprintf(why, n, "malformed answer from remorad at %s", from);
		goto out;
	}
	out->result = rf.result;
	rm_text_escape(out->error, sizeof(out->error), rep->error ? rep->error : "");
	out->session = rep->session_id;
	out->bytes = rep->bytes_moved;
	out->pause_us = rep->pause_us;
	remora__migrate_reply__free_unpacked(rep, NULL);
out:
	rm_link_close(&l);
	return err;
}

/* Moves one session, with a line saying how it went: 0 when it moved. */
static int move_one(const char *from, uint64_t session, const char *name, const char *to, const char *token,
		    unsigned wait_s)
{
	struct move_result r = {0};
	char why[512];
	if (ask(from, session, to, token, wait_s, &r, why, sizeof(why))) {
		fprintf(stderr, "remora migrate: %s\n", why);
		return 1;
	}
	if (r.result) {
		fprintf(stderr, "remora migrate: session %" PRIu64 " (%s) not moved: %s\n", session, name,
			r.error[0] ? r.error : "refused");
		return 1;
	}
	printf("session %" PRIu64 " (%s) moved from %s to %s as session %" PRIu64 ": %.1f MiB moved, "
	       "paused %.1f ms\n", session, name, from, to, r.session, (double)r.bytes / (1 << 20), r.pause_us / 1000.0);
	return 0;
}

/* The session CLIENT names at from: its session number, or else a client's pid (or
 * pid:N, session:N to say which). 0, or 1 after a line. */
static int find_client(const char *from, const char *client, uint64_t *session, char *name, size_t n)
{
	Remora__StatusReply *rep;
	char why[512], *end;
	int by_pid = !strncmp(client, "pid:", 4), by_session = !strncmp(client, "session:", 8);
	const char *num = by_pid ? client + 4 : by_session ? client + 8 : client;
	unsigned long long v = strtoull(num, &end, 10);
	if (!*num || *end) {
		fprintf(stderr, "remora migrate: CLIENT is a session or a pid (session:N, pid:N), not %s\n", client);
		return 1;
	}
	if (fetch_status(from, &rep, why, sizeof(why))) {
		fprintf(stderr, "remora migrate: %s\n", why);
		return 1;
	}
	const Remora__StatusReply__Client *found = NULL;
	for (int pass = by_pid; pass < (by_session ? 1 : 2) && !found; pass++)
		for (size_t i = 0; i < rep->n_clients && !found; i++)
			if (pass ? rep->clients[i]->pid == v : rep->clients[i]->session_id == v)
				found = rep->clients[i];
	if (found) {
		*session = found->session_id;
		rm_text_escape(name, n, found->name);
	} else {
		fprintf(stderr, "remora migrate: %s serves no client %s (see remora status)\n", from, client);
	}
	remora__status_reply__free_unpacked(rep, NULL);
	return !found;
}

int rm_cli_migrate_all(const char *from, const char *to)
{
	Remora__StatusReply *rep;
	char why[512], name[256];
	if (fetch_status(from, &rep, why, sizeof(why))) {
		fprintf(stderr, "remora pool drain --migrate: %s\n", why);
		return 1;
	}
	int failed = 0;
	for (size_t i = 0; i < rep->n_clients; i++)
		failed |= move_one(from, rep->clients[i]->session_id, rm_text_escape(name, sizeof(name), rep->clients[i]->name),
				   to, getenv("REMORA_TOKEN"), 0);
	if (!rep->n_clients)
		printf("%s: no clients to move\n", from);
	remora__status_reply__free_unpacked(rep, NULL);
	return failed;
}

int cmd_migrate(int argc, char **argv)
{
	static const char usage[] = "usage: remora migrate CLIENT --to HOST:PORT [--server HOST:PORT] [--token TOKEN] "
				    "[--wait SECONDS]\n  CLIENT: a session or pid as remora status shows it (session:N, pid:N)\n";
	const char *client = NULL, *to = NULL, *from = getenv("REMORA_SERVER"), *token = getenv("REMORA_TOKEN");
	unsigned wait_s = 0;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			return 0;
		} else if (v && !strcmp(argv[i], "--to")) {
			to = v, i++;
		} else if (v && !strcmp(argv[i], "--server")) {
			from = v, i++;
		} else if (v && !strcmp(argv[i], "--token")) {
			token = v, i++;
		} else if (v && !strcmp(argv[i], "--wait")) {
			wait_s = (unsigned)strtoul(v, NULL, 10), i++;
		} else if (argv[i][0] != '-' && !client) {
			client = argv[i];
		} else {
			fprintf(stderr, "remora migrate: unexpected argument %s\n%s", argv[i], usage);
			return 2;
		}
	}
	if (!client || !to) {
		fputs(usage, stderr);
		return 2;
	}
	if (!from || !*from)
		from = DEFAULT_DAEMON;
	uint64_t session;
	char name[256];
	if (find_client(from, client, &session, name, sizeof(name)))
		return 1;
	return move_one(from, session, name, to, token, wait_s);
}
