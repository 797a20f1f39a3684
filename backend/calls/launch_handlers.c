/* Launches and the occupancy queries that take a function: typed bodies of hand calls
 * (msg=LaunchKernel, OccupancyBlockSize). Arguments arrive packed by the function's
 * layout (frontend/launch.c) and go to the driver as one `extra` buffer. */
#include "dispatch.h"

#include "call_profile.h"
#include "kernel_timing.h"
#include "kernel_watch.h"
#include "launch_replay.h"
#include "remora.pb-c.h"
#include "variable_alias.h"

/* Turns a launch message into a driver launch configuration; attrs must outlive cfg. */
static CUresult launch_config(struct rm_channel *s, struct rm_request *rq, const Remora__LaunchKernel *req,
			      CUlaunchConfig *cfg, void **func)
{
	CUresult r = rm_session_use(s, RM_H_FUNCTION, req->func, func);
	uint64_t part = rm_call_part_begin();
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &cfg->hStream);
	rm_call_part_end(RM_PART_LAUNCH_STREAM, part);
	if (r == CUDA_SUCCESS && req->attrs.len % sizeof(CUlaunchAttribute))
		r = CUDA_ERROR_INVALID_VALUE;
	cfg->gridDimX = req->grid_x;
	cfg->gridDimY = req->grid_y;
	cfg->gridDimZ = req->grid_z;
	cfg->blockDimX = req->block_x;
	cfg->blockDimY = req->block_y;
	cfg->blockDimZ = req->block_z;
	cfg->sharedMemBytes = req->shared_mem;
	cfg->attrs = (CUlaunchAttribute *)req->attrs.data;
	cfg->numAttrs = (unsigned int)(req->attrs.len / sizeof(CUlaunchAttribute));
	for (unsigned int i = 0; r == CUDA_SUCCESS && i < cfg->numAttrs; i++)
		if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
		    cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) /* the client's event handles */
			r = rm_unsupported_use("cuLaunchKernelEx with an event attribute");
	return r;
}

enum launch_kind { PLAIN, EX, COOPERATIVE };

static CUresult launch(struct rm_channel *s, struct rm_request *rq, const Remora__LaunchKernel *req,
		       enum launch_kind kind)
{
	/* A launch joins the channel's run (launch_replay.h); one that may not makes the run first. */
	int replay = kind != COOPERATIVE && !(req->attrs.len % sizeof(CUlaunchAttribute)) &&
		     rm_launch_replay_wanted(s, &rq->frame, (const CUlaunchAttribute *)req->attrs.data,
					     (unsigned)(req->attrs.len / sizeof(CUlaunchAttribute)));
	if (replay)
		rm_launch_replay_before(s, &rq->frame, req->stream);
	else
		rm_launch_replay_flush(s, RM_REPLAY_END_UNREPLAYED);
	void *func;
	CUlaunchConfig cfg;
	CUresult r = launch_config(s, rq, req, &cfg, &func);
	/* cuLaunchCooperativeKernel takes no `extra`: it is done as cuLaunchKernelEx with the
	 * cooperative attribute, whose semantics the driver documents as the same. */
	CUlaunchAttribute coop = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE, .value.cooperative = 1};
	if (r == CUDA_SUCCESS && kind == COOPERATIVE) {
		if (cfg.numAttrs)
			r = CUDA_ERROR_INVALID_VALUE; /* no client sends any */
		cfg.attrs = &coop;
		cfg.numAttrs = 1;
	}
	if (r == CUDA_SUCCESS) {
		rm_session_real_params(s, req->params.data, req->params.len); /* a moved-in client's variables */
		size_t size = req->params.len;
		void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, req->params.data, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
				 CU_LAUNCH_PARAM_END};
		uint64_t part = rm_call_part_begin();
		rm_kernel_timing_before_launch(s, cfg.hStream, &rq->frame, req->stream);
		rm_call_part_end(RM_PART_KERNEL_TIMING, part);
		part = rm_call_part_begin();
		if (replay)
			r = rm_launch_replay_add(s, &rq->frame, req->stream, cfg.hStream, func, &cfg, req->params.data, size,
						 kind == EX);
		else if (kind != PLAIN)
			r = rm_drv_cuLaunchKernelEx(&cfg, func, NULL, size ? extra : NULL);
		else
			r = rm_drv_cuLaunchKernel(func, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX,
						  cfg.blockDimY, cfg.blockDimZ, cfg.sharedMemBytes, cfg.hStream, NULL,
						  size ? extra : NULL);
		rm_call_part_end(RM_PART_DRIVER_LAUNCH, part);
		if (r == CUDA_SUCCESS && !replay)
			rm_kernel_watch_launched(s, cfg.hStream);
	}
	if (r != CUDA_SUCCESS) /* its error after those of the launches before it */
		rm_launch_replay_flush(s, RM_REPLAY_END_UNREPLAYED);
	return r;
}

CUresult rm_body_cuLaunchKernel(struct rm_channel *s, struct rm_request *rq, const Remora__LaunchKernel *req)
{
	return launch(s, rq, req, PLAIN);
}

CUresult rm_body_cuLaunchKernelEx(struct rm_channel *s, struct rm_request *rq, const Remora__LaunchKernel *req)
{
	return launch(s, rq, req, EX);
}

CUresult rm_body_rmLaunchKernelExWait(struct rm_channel *s, struct rm_request *rq, const Remora__LaunchKernel *req)
{
	return launch(s, rq, req, EX);
}

CUresult rm_body_cuLaunchCooperativeKernel(struct rm_channel *s, struct rm_request *rq,
					   const Remora__LaunchKernel *req)
{
	return launch(s, rq, req, COOPERATIVE);
}

CUresult rm_body_cuOccupancyMaxActiveClusters(struct rm_channel *s, struct rm_request *rq, const Remora__LaunchKernel *req,
					      Remora__OccupancyClustersReply *rep)
{
	void *func;
	CUlaunchConfig cfg;
	CUresult r = launch_config(s, rq, req, &cfg, &func);
	return r == CUDA_SUCCESS ? rm_drv_cuOccupancyMaxActiveClusters(&rep->clusters, func, &cfg) : r;
}

CUresult rm_body_cuOccupancyMaxPotentialClusterSize(struct rm_channel *s, struct rm_request *rq,
						    const Remora__LaunchKernel *req, Remora__OccupancyClustersReply *rep)
{
	void *func;
	CUlaunchConfig cfg;
	CUresult r = launch_config(s, rq, req, &cfg, &func);
	return r == CUDA_SUCCESS ? rm_drv_cuOccupancyMaxPotentialClusterSize(&rep->clusters, func, &cfg) : r;
}

/* Without a callback: the client runs those that have one. */
CUresult rm_body_cuOccupancyMaxPotentialBlockSizeWithFlags(struct rm_channel *s, struct rm_request *rq,
							   const Remora__OccupancyBlockSize *req,
							   Remora__OccupancyBlockSizeReply *rep)
{
	(void)rq;
	void *func;
	CUresult r = rm_session_use(s, RM_H_FUNCTION, req->func, &func);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuOccupancyMaxPotentialBlockSizeWithFlags(&rep->min_grid_size, &rep->block_size, func, NULL,
								     (size_t)req->dynamic_smem, req->block_size_limit,
								     req->flags);
	return r;
}

CUresult rm_body_cuOccupancyMaxPotentialBlockSize(struct rm_channel *s, struct rm_request *rq,
						  const Remora__OccupancyBlockSize *req,
						  Remora__OccupancyBlockSizeReply *rep)
{
	(void)rq;
	void *func;
	CUresult r = req->flags ? CUDA_ERROR_INVALID_VALUE : rm_session_use(s, RM_H_FUNCTION, req->func, &func);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuOccupancyMaxPotentialBlockSize(&rep->min_grid_size, &rep->block_size, func, NULL,
							    (size_t)req->dynamic_smem, req->block_size_limit);
	return r;
}
