/* A throwaway self-signed certificate (selfsigned.h). */
#include "selfsigned.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static int add_ext(X509 *cert, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, cert, cert, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	int ok = ext && X509_add_ext(cert, ext, -1) == 1;
	X509_EXTENSION_free(ext);
	return ok ? 0 : -1;
}

/* path written with mode 0600, by write_pem(f, what). */
static int write_file(const char *path, int (*write_pem)(FILE *, void *), void *what)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int ok = write_pem(f, what) == 1;
	return fclose(f) == 0 && ok ? 0 : -1;
}

static int pem_key(FILE *f, void *key)
{
	return PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
}

static int pem_cert(FILE *f, void *cert)
{
	return PEM_write_X509(f, cert);
}

int bench_selfsigned_write(const char *dir, char *why, size_t whylen)
{
	char cert_path[PATH_MAX], key_path[PATH_MAX];
	const char *step = "the key";
	int rc = -1;
	X509 *cert = NULL;
	EVP_PKEY *key = EVP_EC_gen("P-256");
	if (!key)
		goto out;
	step = "the certificate";
	if (!(cert = X509_new()) || X509_set_version(cert, 2) != 1 ||
	    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1) != 1 || !X509_gmtime_adj(X509_getm_notBefore(cert), -60) ||
	    !X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600) || X509_set_pubkey(cert, key) != 1)
		goto out;
	X509_NAME *name = X509_get_subject_name(cert);
	if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"remora bench", -1, -1, 0) != 1 ||
	    X509_set_issuer_name(cert, name) != 1)
		goto out;
	/* Its own CA (clients trust it as REMORA_TLS_CA) and a server for 127.0.0.1 and the
	 * emulated link's server address (scripts/link-emu.sh). */
	step = "the certificate's extensions";
	if (add_ext(cert, NID_basic_constraints, "critical,CA:TRUE") ||
	    add_ext(cert, NID_key_usage, "critical,digitalSignature,keyCertSign") ||
	    add_ext(cert, NID_ext_key_usage, "serverAuth") || add_ext(cert, NID_subject_key_identifier, "hash") ||
	    add_ext(cert, NID_subject_alt_name, "IP:127.0.0.1,IP:10.77.0.2"))
		goto out;
	step = "the signature";
	if (!X509_sign(cert, key, EVP_sha256()))
		goto out;
	snprintf(cert_path, sizeof cert_path, "%s/cert.pem", dir);
	snprintf(key_path, sizeof key_path, "%s/key.pem", dir);
	step = "writing the files";
	if (write_file(key_path, pem_key, key) || write_file(cert_path, pem_cert, cert))
		goto out;
	rc = 0;
out:
	if (rc) {
		unsigned long e = ERR_get_error();
		snprintf(why, whylen, "a self-signed certificate: %s failed%s%s", step, e ? ": " : "",
			 e ? ERR_reason_error_string(e) : "");
	}
	X509_free(cert);
	EVP_PKEY_free(key);
	return rc;
}
