/* cuStreamBatchMemOp: writes of 32 and 64 bits (the latter as two 32-bit writes, low word
 * first), barriers and flushes (nothing to do on one CPU); waits by a word are not modelled. */
#include "testdriver.h"

static CUresult batch(CUstream stream, unsigned count, const CUstreamBatchMemOpParams *ops, unsigned flags)
{
	if (flags || (count && !ops) || count >= 256)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < count; i++) { /* checked whole first: a bad batch does nothing */
		CUdeviceptr a = ops[i].writeValue.address;
		switch (ops[i].operation) {
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
		case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
			size_t n = ops[i].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
			if (a % n || !td_device_range_ok((const void *)(uintptr_t)a, n))
				return CUDA_ERROR_INVALID_VALUE;
			break;
		}
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
		case CU_STREAM_MEM_OP_BARRIER:
			break;
		default:
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	for (unsigned i = 0; i < count; i++) {
		const CUstreamBatchMemOpParams *op = &ops[i];
		CUresult rc = CUDA_SUCCESS;
		if (op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32) {
			rc = cuStreamWriteValue32_v2(stream, op->writeValue.address, op->writeValue.value, 0);
		} else if (op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
			cuuint64_t v = op->writeValue.value64;
			rc = cuStreamWriteValue32_v2(stream, op->writeValue.address, (cuuint32_t)v, 0);
			if (rc == CUDA_SUCCESS)
				rc = cuStreamWriteValue32_v2(stream, op->writeValue.address + 4,
							     (cuuint32_t)(v >> 32), 0);
		}
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *ops,
					 unsigned int flags)
{
	return batch(stream, count, ops, flags);
}

TD_EXPORT CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *ops,
				      unsigned int flags)
{
	return batch(stream, count, ops, flags);
}
