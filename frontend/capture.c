/* Stream capture: cuStreamBeginCapture is not supported, so no stream is ever
 * capturing and these queries are answered here. */
#include "client.h"

RM_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	(void)hStream;
	if (!captureStatus)
		return CUDA_ERROR_INVALID_VALUE;
	*captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						  cuuint64_t *id_out)
{
	if (id_out)
		*id_out = 0;
	return cuStreamIsCapturing(hStream, captureStatus_out);
}

RM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	if (graph_out)
		*graph_out = NULL;
	if (dependencies_out)
		*dependencies_out = NULL;
	if (numDependencies_out)
		*numDependencies_out = 0;
	return cuStreamGetCaptureInfo(hStream, captureStatus_out, id_out);
}

RM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out,
						     const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	if (edgeData_out)
		*edgeData_out = NULL;
	return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
					 numDependencies_out);
}
