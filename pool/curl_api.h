/* The libcurl functions the pool uses, as a table: remorad and the CLI link libcurl
 * (curl_linked.c); the client library, loaded into every CUDA program, loads it only
 * when a program is placed from a pool (curl_loaded.c, docs/pool.md). */
#ifndef REMORA_POOL_CURL_API_H
#define REMORA_POOL_CURL_API_H

#include <stddef.h>

#include <curl/curl.h>

struct rm_curl_api {
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
	CURLcode (*easy_perform)(CURL *curl);
	CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
	void (*easy_cleanup)(CURL *curl);
	struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
	void (*slist_free_all)(struct curl_slist *list);
};

/* The table, with curl_global_init done once; NULL, with why filled, when libcurl cannot
 * be had. Safe from any thread. */
const struct rm_curl_api *rm_curl_api(char *why, size_t whylen);

#endif
