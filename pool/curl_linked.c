/* libcurl linked in (curl_api.h): remorad, the remora CLI and the tests. */
#include "curl_api.h"

#include <pthread.h>
#include <stdio.h>

static const struct rm_curl_api linked = {
	.easy_init = curl_easy_init,
	.easy_setopt = curl_easy_setopt,
	.easy_perform = curl_easy_perform,
	.easy_getinfo = curl_easy_getinfo,
	.easy_cleanup = curl_easy_cleanup,
	.slist_append = curl_slist_append,
	.slist_free_all = curl_slist_free_all,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CURLcode init_result;

static void global_init(void)
{
	init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

const struct rm_curl_api *rm_curl_api(char *why, size_t whylen)
{
	pthread_once(&once, global_init);
	if (init_result != CURLE_OK) {
		snprintf(why, whylen, "libcurl cannot start: %s", curl_easy_strerror(init_result));
		return NULL;
	}
	return &linked;
}
