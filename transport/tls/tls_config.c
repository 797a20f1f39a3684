/* The TLS transport's configuration (tls.h): each side's OpenSSL context, and the traffic
 * secrets OpenSSL hands over through its key log. */
#include "tls_conn.h"

SSL_CTX *tls_server_ctx, *tls_client_ctx;
int tls_clients_verified;

/* ---- contexts ---- */

static void keylog(const SSL *ssl, const char *line);

static void ssl_why(char *why, size_t whylen, const char *what, const char *file)
{
	unsigned long e = ERR_get_error();
	char buf[200] = "";
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	snprintf(why, whylen, "%s %s: %s", what, file, e ? buf : "unusable");
	ERR_clear_error();
}

/* Called where the server asks for a client certificate and none is configured: noted, so
 * that the client says so instead of failing later on a closed connection. */
static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
	struct tls_conn *c = SSL_get_app_data(ssl);
	if (c)
		c->cert_requested = 1;
	return 0;
}

static SSL_CTX *new_ctx(int server)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
	/* The suites whose records this transport (and the kernel) can take over. */
	SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384");
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_keylog_callback(ctx, keylog);
	if (!server)
		SSL_CTX_set_client_cert_cb(ctx, no_client_cert);
	return ctx;
}

static int load_pair(SSL_CTX *ctx, const char *cert, const char *key, char *why, size_t whylen)
{
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		ssl_why(why, whylen, "cannot use the certificate", cert);
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		ssl_why(why, whylen, "cannot use the private key", key);
		return -1;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(why, whylen, "the key %s does not belong to the certificate %s", key, cert);
		ERR_clear_error();
		return -1;
	}
	return 0;
}

/* A warning in why when the daemon's certificate has expired or expires within 30 days
 * (every client would refuse it, or soon will), else "". */
static void note_expiry(SSL_CTX *ctx, const char *cert, char *why, size_t whylen)
{
	X509 *leaf = SSL_CTX_get0_certificate(ctx);
	const ASN1_TIME *end = leaf ? X509_get0_notAfter(leaf) : NULL;
	int days = 0, secs = 0;
	char when[64] = "";
	why[0] = 0;
	if (!end || !ASN1_TIME_diff(&days, &secs, NULL, end) || days >= 30)
		return;
	BIO *b = BIO_new(BIO_s_mem());
	int n = b && ASN1_TIME_print(b, end) ? BIO_read(b, when, (int)sizeof(when) - 1) : 0;
	BIO_free(b);
	when[n > 0 ? n : 0] = 0;
	if (days < 0 || secs < 0)
		snprintf(why, whylen, "the certificate %s expired on %s: every client will refuse it until it is "
			 "renewed", cert, when);
	else
		snprintf(why, whylen, "the certificate %s expires on %s (in %d day(s)): renew it before then", cert,
			 when, days);
}

int rm_tls_server_configure(const char *cert, const char *key, const char *client_ca, char *why, size_t whylen)
{
	SSL_CTX *ctx = new_ctx(1);
	if (!ctx) {
		snprintf(why, whylen, "OpenSSL cannot make a TLS context");
		return -1;
	}
	if (load_pair(ctx, cert, key, why, whylen))
		goto fail;
	if (client_ca && *client_ca) {
		if (SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1) {
			ssl_why(why, whylen, "cannot use the client CA", client_ca);
			goto fail;
		}
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
		if (names)
			SSL_CTX_set_client_CA_list(ctx, names);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	if (tls_server_ctx)
		SSL_CTX_free(tls_server_ctx);
	tls_server_ctx = ctx;
	tls_clients_verified = client_ca && *client_ca;
	note_expiry(ctx, cert, why, whylen);
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -1;
}

int rm_tls_client_configure(const char *ca, const char *cert, const char *key, char *why, size_t whylen)
{
	SSL_CTX *ctx = new_ctx(0);
	if (!ctx) {
		snprintf(why, whylen, "OpenSSL cannot make a TLS context");
		return -1;
	}
	if (ca && *ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		ssl_why(why, whylen, "cannot use the CA", ca && *ca ? ca : "(the system's store)");
		goto fail;
	}
	if ((cert && *cert) != (key && *key)) {
		snprintf(why, whylen, "a client certificate needs both REMORA_TLS_CERT and REMORA_TLS_KEY");
		goto fail;
	}
	if (cert && *cert && load_pair(ctx, cert, key, why, whylen))
		goto fail;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (tls_client_ctx)
		SSL_CTX_free(tls_client_ctx);
	tls_client_ctx = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -1;
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int env_result;
static char env_why[300];

static void configure_env(void)
{
	env_result = rm_tls_client_configure(getenv("REMORA_TLS_CA"), getenv("REMORA_TLS_CERT"),
					     getenv("REMORA_TLS_KEY"), env_why, sizeof(env_why));
}

int rm_tls_client_configure_env(char *why, size_t whylen)
{
	pthread_once(&env_once, configure_env);
	if (env_result)
		snprintf(why, whylen, "%s", env_why);
	return env_result;
}

/* ---- the traffic secrets, from the key log ---- */

static int unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = 0;
	for (; s[0] && s[1] && s[0] != ' ' && n < cap; s += 2) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			return -1;
		out[n++] = (uint8_t)v;
	}
	return *s && *s != ' ' ? -1 : (int)n;
}

/* OpenSSL's key log: the application traffic secrets are the ones kept. */
static void keylog(const SSL *ssl, const char *line)
{
	struct tls_conn *c = SSL_get_app_data(ssl);
	static const char client_label[] = "CLIENT_TRAFFIC_SECRET_0 ", server_label[] = "SERVER_TRAFFIC_SECRET_0 ";
	int is_client = !strncmp(line, client_label, sizeof(client_label) - 1);
	if (!c || (!is_client && strncmp(line, server_label, sizeof(server_label) - 1)))
		return;
	const char *p = strchr(line + sizeof(client_label) - 1, ' '); /* past the client random */
	if (!p)
		return;
	int tx = is_client != c->server;
	int n = unhex(p + 1, tx ? c->secret_tx : c->secret_rx, SECRET_MAX);
	if (n <= 0)
		return;
	c->secret_len = (size_t)n;
	c->secrets |= tx ? 1 : 2;
}
