// expect: SPEC:4: CUlimit is not a handle type of cuda.h (typedef struct X *CUlimit;)
enum rm_handle_kind {
	RM_H_CONTEXT = 1, /* CUcontext */
	RM_H_LIMIT,       /* CUlimit */
};
