/* One POST to etcd's gateway over libcurl (etcd_post.h). A new handle per request: the
 * pool asks a few times a second at most, and nothing is held between calls. */
#include "etcd_post.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curl_api.h"

/* The answer's body as it arrives, refused past RM_ETCD_MAX_REPLY. */
struct sink {
	char *p;
	size_t len, cap;
	int too_long;
};

static size_t take(char *data, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb; /* size is always 1 */
	if (n > RM_ETCD_MAX_REPLY - s->len) {
		s->too_long = 1;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < s->len + n + 1)
			cap *= 2;
		char *p = realloc(s->p, cap);
		if (!p)
			return 0;
		s->p = p;
		s->cap = cap;
	}
	memcpy(s->p + s->len, data, n);
	s->len += n;
	s->p[s->len] = 0;
	return n;
}

/* Whether rc, on an https:// endpoint, is TLS refusing: a certificate not trusted either
 * way. With TLS 1.3 etcd's refusal of a client certificate arrives as an alert on the
 * first read after the handshake or, racing it, as the connection closing: so a
 * connection that got through TCP and closed before any HTTP answer is taken for one. */
static int tls_refusal(CURLcode rc, int connected)
{
	if (rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION)
		return 1;
	return connected && rc != CURLE_OPERATION_TIMEDOUT && rc != CURLE_OUT_OF_MEMORY && rc != CURLE_WRITE_ERROR &&
	       rc != CURLE_FILESIZE_EXCEEDED && rc != CURLE_SSL_CERTPROBLEM && rc != CURLE_SSL_CACERT_BADFILE;
}

/* -errno and e->error for a request that got no answer. */
static int failed(struct rm_etcd *e, const char *endpoint, CURLcode rc, long os_errno, int connected,
		  const struct sink *s, const char *detail)
{
	int https = !strncmp(endpoint, "https://", 8), err;
	if (s->too_long) {
		snprintf(e->error, sizeof(e->error), "etcd at %s sent more than %u bytes", endpoint, RM_ETCD_MAX_REPLY);
		return -EMSGSIZE;
	}
	if (https && tls_refusal(rc, connected)) {
		int closed = !strstr(detail, "SSL") && !strstr(detail, "certificate");
		snprintf(e->error, sizeof(e->error), "TLS with etcd at %s failed: %s%s", endpoint, detail,
			 closed ? " (etcd closed the connection: does it want a client certificate it trusts?)" : "");
		return -EACCES;
	}
	switch (rc) {
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
		snprintf(e->error, sizeof(e->error), "cannot use the TLS files for etcd at %s: %s", endpoint, detail);
		return -EINVAL;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		snprintf(e->error, sizeof(e->error), "%s is not an etcd endpoint: %s", endpoint, detail);
		return -EINVAL;
	case CURLE_OUT_OF_MEMORY: err = -ENOMEM; break;
	case CURLE_OPERATION_TIMEDOUT: err = -ETIMEDOUT; break;
	case CURLE_COULDNT_RESOLVE_HOST: err = -EHOSTUNREACH; break;
	case CURLE_COULDNT_CONNECT: err = os_errno > 0 ? -(int)os_errno : -ECONNREFUSED; break;
	case CURLE_WRITE_ERROR: err = -ENOMEM; break; /* take() could not grow */
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING: err = -ECONNRESET; break;
	default: err = -EPROTO; break;
	}
	snprintf(e->error, sizeof(e->error), "cannot reach etcd at %s: %s", endpoint, detail);
	return err;
}

int rm_etcd_post(struct rm_etcd *e, const char *endpoint, const char *path, const char *body, const char *token,
		 long *status, char **reply, size_t *reply_len)
{
	const struct rm_curl_api *curl = rm_curl_api(e->error, sizeof(e->error));
	if (!curl)
		return -ENOSYS;
	char url[512], auth[sizeof(e->token) + 32];
	/* rm_etcd_init accepted only http:// and https:// endpoints, or host:port for http. */
	if (snprintf(url, sizeof(url), "%s%s%s", strstr(endpoint, "://") ? "" : "http://", endpoint, path) >=
	    (int)sizeof(url)) {
		snprintf(e->error, sizeof(e->error), "the etcd endpoint %s is too long", endpoint);
		return -EINVAL;
	}
	CURL *h = curl->easy_init();
	struct curl_slist *headers = curl->slist_append(NULL, "Content-Type: application/json");
	struct curl_slist *more = headers ? curl->slist_append(headers, "Expect:") : NULL;
	if (more && token) {
		snprintf(auth, sizeof(auth), "Authorization: %s", token);
		more = curl->slist_append(more, auth);
	}
	if (!h || !more) {
		curl->slist_free_all(headers);
		if (h)
			curl->easy_cleanup(h);
		snprintf(e->error, sizeof(e->error), "out of memory");
		return -ENOMEM;
	}
	headers = more;
	long timeout = e->timeout_ms > 0 ? e->timeout_ms : RM_ETCD_TIMEOUT_MS;
	char detail[CURL_ERROR_SIZE] = "";
	struct sink s = {0};
	curl->easy_setopt(h, CURLOPT_URL, url);
	curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl->easy_setopt(h, CURLOPT_PROXY, ""); /* never a proxy from the environment */
	curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM in a threaded program */
	curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
	curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout);
	curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl->easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl->easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, take);
	curl->easy_setopt(h, CURLOPT_WRITEDATA, &s);
	curl->easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)RM_ETCD_MAX_REPLY);
	curl->easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
	curl->easy_setopt(h, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	if (e->cred.ca_file[0])
		curl->easy_setopt(h, CURLOPT_CAINFO, e->cred.ca_file);
	if (e->cred.cert_file[0]) {
		curl->easy_setopt(h, CURLOPT_SSLCERT, e->cred.cert_file);
		curl->easy_setopt(h, CURLOPT_SSLKEY, e->cred.key_file);
	}
	CURLcode rc = curl->easy_perform(h);
	long os_errno = 0;
	int err = 0;
	if (rc == CURLE_OK) {
		curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	} else {
		curl_off_t connect_us = 0;
		curl->easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
		curl->easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);
		if (rc == CURLE_FILESIZE_EXCEEDED)
			s.too_long = 1;
		if (!detail[0])
			snprintf(detail, sizeof(detail), "libcurl error %d", (int)rc);
		err = failed(e, endpoint, rc, os_errno, connect_us > 0, &s, detail);
	}
	curl->easy_cleanup(h);
	curl->slist_free_all(headers);
	if (!err && !s.p && !(s.p = calloc(1, 1)))
		err = -ENOMEM;
	if (err) {
		free(s.p);
		return err;
	}
	*reply = s.p;
	*reply_len = s.len;
	return 0;
}
