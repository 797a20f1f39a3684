// expect: SPEC:4: CUstream has two kinds, RM_H_STREAM and RM_H_STREAM2
enum rm_handle_kind {
	RM_H_STREAM = 1, /* CUstream */
	RM_H_STREAM2,    /* CUstream */
};
