/* The handle kinds, as backend/session.h writes them, for tests/unit/test_gen_api.py. */
enum rm_handle_kind {
	RM_H_CONTEXT = 1, /* CUcontext */
	RM_H_STREAM,      /* CUstream */
	RM_H_EVENT,       /* CUevent */
	RM_H_MODULE,      /* CUmodule */
	RM_H_FUNCTION,    /* CUfunction */
	RM_H_MEMORY,  /* a device allocation: value is its base, size its length */
};
