/* RM_OP_DEVICE_STATE (common/wire.h), the NVML shim's question: a handler of the worker. */
#ifndef REMORA_DEVICE_STATE_H
#define REMORA_DEVICE_STATE_H

#include "dispatch.h"

void rm_handle_device_state(struct rm_channel *s, struct rm_request *rq);

#endif
