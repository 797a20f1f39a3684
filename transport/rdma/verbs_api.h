/* libibverbs and librdmacm, loaded when an rdma:// address is first used (verbs_loaded.c):
 * a program that never names one loads neither, and a host without rdma-core can run
 * everything else. The inline verbs of <infiniband/verbs.h> (ibv_post_send, ibv_post_recv,
 * ibv_poll_cq, ibv_req_notify_cq) go through the device's own ops and need nothing here. */
#ifndef REMORA_RDMA_VERBS_API_H
#define REMORA_RDMA_VERBS_API_H

#include <stddef.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

struct rm_verbs_api {
	/* librdmacm */
	struct rdma_event_channel *(*create_event_channel)(void);
	void (*destroy_event_channel)(struct rdma_event_channel *ch);
	int (*create_id)(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context, enum rdma_port_space ps);
	int (*destroy_id)(struct rdma_cm_id *id);
	int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
	int (*listen)(struct rdma_cm_id *id, int backlog);
	__be16 (*get_src_port)(struct rdma_cm_id *id);
	int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms);
	int (*resolve_route)(struct rdma_cm_id *id, int timeout_ms);
	int (*create_qp)(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	void (*destroy_qp)(struct rdma_cm_id *id);
	int (*connect)(struct rdma_cm_id *id, struct rdma_conn_param *param);
	int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *param);
	int (*reject)(struct rdma_cm_id *id, const void *private_data, uint8_t len);
	int (*disconnect)(struct rdma_cm_id *id);
	int (*get_cm_event)(struct rdma_event_channel *ch, struct rdma_cm_event **event);
	int (*ack_cm_event)(struct rdma_cm_event *event);
	const char *(*event_str)(enum rdma_cm_event_type event);
	/* libibverbs */
	struct ibv_device **(*get_device_list)(int *n);
	void (*free_device_list)(struct ibv_device **list);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
	int (*destroy_comp_channel)(struct ibv_comp_channel *cc);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *cc,
				    int vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	int (*get_cq_event)(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	const char *(*wc_status_str)(enum ibv_wc_status status);
};

/* The loaded libraries' functions, or NULL with why (which library is missing) written. */
const struct rm_verbs_api *rm_verbs_api(char *why, size_t whylen);

#endif
