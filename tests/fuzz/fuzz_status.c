/* Fuzz target `status`: what `remora status` does with a daemon's answer (cli/pool.c,
 * print_status): the StatusReply anything at the address asked may send. Input: byte 0
 * picks the output (bit 0: JSON, else the table), the rest is the reply's message. A reply
 * that unpacks is printed; its JSON parses (json-c) as an object whose gpus, clients,
 * tenants and history hold as many entries as the reply, and its strings come back as
 * sent (escaping loses nothing). */
#include "../../cli/pool.c"

#include <json-c/json.h>
#include <unistd.h>

static FILE *capture; /* stdout goes here while the reply prints */

/* Prints r with stdout captured; the output, NUL-terminated (free it), or NULL. */
static char *printed(const Remora__StatusReply *r, int json)
{
	if (!capture && !(capture = tmpfile()))
		abort();
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	if (saved < 0 || ftruncate(fileno(capture), 0) || dup2(fileno(capture), STDOUT_FILENO) < 0)
		abort();
	rewind(stdout);
	print_status(r, json);
	fflush(stdout);
	if (dup2(saved, STDOUT_FILENO) < 0)
		abort();
	close(saved);
	long n = lseek(fileno(capture), 0, SEEK_END);
	char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (!text || pread(fileno(capture), text, (size_t)n, 0) != n)
		abort();
	text[n] = 0;
	return text;
}

static void check_array(json_object *o, const char *key, size_t n)
{
	json_object *a;
	if (!json_object_object_get_ex(o, key, &a) || !json_object_is_type(a, json_type_array) ||
	    json_object_array_length(a) != n)
		abort();
}

/* A string of the reply against what its JSON says: equal where the reply's is ASCII
 * without NUL (the JSON escapes each byte above 0x7f as the Latin-1 character). */
static void check_string(json_object *o, const char *key, const char *sent)
{
	json_object *s;
	if (!json_object_object_get_ex(o, key, &s) || !json_object_is_type(s, json_type_string))
		abort();
	for (const unsigned char *p = (const unsigned char *)sent; *p; p++)
		if (*p >= 0x80)
			return;
	if (strcmp(json_object_get_string(s), sent))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	Remora__StatusReply *r = remora__status_reply__unpack(NULL, size - 1, data + 1);
	if (!r)
		return 0;
	int json = data[0] & 1;
	char *text = printed(r, json);
	if (json) {
		json_object *o = json_tokener_parse(text);
		if (!o || !json_object_is_type(o, json_type_object))
			abort();
		check_array(o, "gpus", r->n_gpus);
		check_array(o, "clients", r->n_clients);
		check_array(o, "tenants", r->n_tenants);
		check_array(o, "history", r->n_history);
		check_string(o, "host", r->host);
		check_string(o, "pool", r->pool);
		json_object_put(o);
	}
	free(text);
	remora__status_reply__free_unpacked(r, NULL);
	return 0;
}
