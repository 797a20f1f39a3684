/* libcurl loaded when first needed (curl_api.h): the client library. A program that never
 * reads a pool never loads libcurl and what it pulls in (docs/pool.md). Once loaded it
 * stays: a handle may still be in use on another thread. */
#include "curl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define LIBCURL "libcurl.so.4"

static struct rm_curl_api loaded;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void)
{
	void *lib = dlopen(LIBCURL, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(load_error, sizeof(load_error), "the pool needs libcurl (%s), which cannot be loaded: %s", LIBCURL,
			 dlerror());
		return;
	}
	CURLcode (*global_init)(long) = (CURLcode(*)(long))dlsym(lib, "curl_global_init");
	struct rm_curl_api api = {
		.easy_init = (CURL * (*)(void)) dlsym(lib, "curl_easy_init"),
		.easy_setopt = (CURLcode(*)(CURL *, CURLoption, ...))dlsym(lib, "curl_easy_setopt"),
		.easy_perform = (CURLcode(*)(CURL *))dlsym(lib, "curl_easy_perform"),
		.easy_getinfo = (CURLcode(*)(CURL *, CURLINFO, ...))dlsym(lib, "curl_easy_getinfo"),
		.easy_cleanup = (void (*)(CURL *))dlsym(lib, "curl_easy_cleanup"),
		.slist_append = (struct curl_slist * (*)(struct curl_slist *, const char *)) dlsym(lib, "curl_slist_append"),
		.slist_free_all = (void (*)(struct curl_slist *))dlsym(lib, "curl_slist_free_all"),
	};
	if (!global_init || !api.easy_init || !api.easy_setopt || !api.easy_perform || !api.easy_getinfo ||
	    !api.easy_cleanup || !api.slist_append || !api.slist_free_all) {
		snprintf(load_error, sizeof(load_error), "%s lacks a function the pool needs", LIBCURL);
		return;
	}
	if (global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(load_error, sizeof(load_error), "%s cannot start", LIBCURL);
		return;
	}
	loaded = api;
}

const struct rm_curl_api *rm_curl_api(char *why, size_t whylen)
{
	pthread_once(&once, load);
	if (!loaded.easy_init) {
		snprintf(why, whylen, "%s", load_error);
		return NULL;
	}
	return &loaded;
}
