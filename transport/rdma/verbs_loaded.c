/* libibverbs and librdmacm loaded when first needed (verbs_api.h). Once loaded they stay:
 * another connection may be using them. */
#include "verbs_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define LIBIBVERBS "libibverbs.so.1"
#define LIBRDMACM "librdmacm.so.1"

static struct rm_verbs_api loaded;
static int complete;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[300];

/* Each entry: where in the table the function goes, and its name. */
#define ENTRY(field, name) {(void **)&api.field, name}

static void load(void)
{
	void *verbs = dlopen(LIBIBVERBS, RTLD_NOW | RTLD_LOCAL);
	void *cm = verbs ? dlopen(LIBRDMACM, RTLD_NOW | RTLD_LOCAL) : NULL;
	if (!cm) {
		snprintf(load_error, sizeof(load_error), "the rdma transport needs %s (rdma-core), which cannot be loaded: %s",
			 verbs ? LIBRDMACM : LIBIBVERBS, dlerror());
		return;
	}
	struct rm_verbs_api api;
	const struct {
		void **slot;
		const char *name;
	} cm_entries[] = {
		ENTRY(create_event_channel, "rdma_create_event_channel"),
		ENTRY(destroy_event_channel, "rdma_destroy_event_channel"),
		ENTRY(create_id, "rdma_create_id"),
		ENTRY(destroy_id, "rdma_destroy_id"),
		ENTRY(bind_addr, "rdma_bind_addr"),
		ENTRY(listen, "rdma_listen"),
		ENTRY(get_src_port, "rdma_get_src_port"),
		ENTRY(resolve_addr, "rdma_resolve_addr"),
		ENTRY(resolve_route, "rdma_resolve_route"),
		ENTRY(create_qp, "rdma_create_qp"),
		ENTRY(destroy_qp, "rdma_destroy_qp"),
		ENTRY(connect, "rdma_connect"),
		ENTRY(accept, "rdma_accept"),
		ENTRY(reject, "rdma_reject"),
		ENTRY(disconnect, "rdma_disconnect"),
		ENTRY(get_cm_event, "rdma_get_cm_event"),
		ENTRY(ack_cm_event, "rdma_ack_cm_event"),
		ENTRY(event_str, "rdma_event_str"),
	}, verbs_entries[] = {
		ENTRY(get_device_list, "ibv_get_device_list"),
		ENTRY(free_device_list, "ibv_free_device_list"),
		ENTRY(alloc_pd, "ibv_alloc_pd"),
		ENTRY(dealloc_pd, "ibv_dealloc_pd"),
		ENTRY(create_comp_channel, "ibv_create_comp_channel"),
		ENTRY(destroy_comp_channel, "ibv_destroy_comp_channel"),
		ENTRY(create_cq, "ibv_create_cq"),
		ENTRY(destroy_cq, "ibv_destroy_cq"),
		ENTRY(reg_mr, "ibv_reg_mr"),
		ENTRY(dereg_mr, "ibv_dereg_mr"),
		ENTRY(get_cq_event, "ibv_get_cq_event"),
		ENTRY(ack_cq_events, "ibv_ack_cq_events"),
		ENTRY(wc_status_str, "ibv_wc_status_str"),
	};
	for (size_t i = 0; i < sizeof(cm_entries) / sizeof(cm_entries[0]); i++)
		if (!(*cm_entries[i].slot = dlsym(cm, cm_entries[i].name))) {
			snprintf(load_error, sizeof(load_error), "%s lacks %s", LIBRDMACM, cm_entries[i].name);
			return;
		}
	for (size_t i = 0; i < sizeof(verbs_entries) / sizeof(verbs_entries[0]); i++)
		if (!(*verbs_entries[i].slot = dlsym(verbs, verbs_entries[i].name))) {
			snprintf(load_error, sizeof(load_error), "%s lacks %s", LIBIBVERBS, verbs_entries[i].name);
			return;
		}
	loaded = api;
	complete = 1;
}

const struct rm_verbs_api *rm_verbs_api(char *why, size_t whylen)
{
	pthread_once(&once, load);
	if (!complete) {
		snprintf(why, whylen, "%s", load_error);
		return NULL;
	}
	return &loaded;
}
