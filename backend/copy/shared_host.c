/* Shared pinned memory (shared_host.h). */
#include "shared_host.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "copy_profile.h"
#include "deferred.h"
#include "log.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "stream_wait.h"

#define FD_WAIT_MS 2000 /* the descriptor was sent before the frame: it is there, or never comes */

/* Index of the first region whose addr >= addr. Under shared_lock. */
static int region_at(const struct rm_session *sh, uint64_t addr)
{
	int lo = 0, hi = sh->nshared;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (sh->shared[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Makes some context of the session current for a registration's change where the
 * request named none (registrations are PORTABLE: any context will do); 1 when the
 * caller must go back to none. */
static int any_ctx(struct rm_channel *s)
{
	if (s->thread_ctx || !__atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE))
		return 0;
	return rm_drv_cuCtxSetCurrent(s->sh->ctxs[0].ctx) == CUDA_SUCCESS;
}

static void unregister(struct rm_channel *s, const struct rm_shared_region *r)
{
	int pushed = any_ctx(s);
	CUresult res = rm_drv_cuMemHostUnregister(r->map);
	if (pushed)
		rm_drv_cuCtxSetCurrent(NULL);
	if (res != CUDA_SUCCESS)
		rm_session_log(s, RM_LOG_WARN, "unregistering shared pinned region 0x%llx: error %d",
		               (unsigned long long)r->addr, (int)res);
	munmap(r->map, r->map_len);
}

/* The daemon's mapping of a region, kept until the driver has unregistered it. */
struct mapping {
	void *map;
	size_t len;
};

static void unmap_after(void *arg)
{
	struct mapping *m = arg;
	munmap(m->map, m->len);
	free(m);
}

/* As unregister, but off the client's thread (deferred.h): cuMemHostUnregister waits
 * for every client's work in the shared context. The client's own work is done. */
static void unregister_later(struct rm_channel *s, const struct rm_shared_region *r)
{
	struct mapping *m = malloc(sizeof(*m));
	CUcontext ctx = s->thread_ctx;
	if (!ctx && __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE))
		ctx = s->sh->ctxs[0].ctx; /* registrations are PORTABLE: any context will do */
	if (!m || !ctx) {
		free(m);
		unregister(s, r);
		return;
	}
	*m = (struct mapping){.map = r->map, .len = r->map_len};
	rm_deferred_release(ctx, RM_DEFER_HOST_UNREGISTER, (uint64_t)(uintptr_t)r->map, unmap_after, m);
}

/* Maps the client's memfd for a region of len bytes: refused (a line says why) unless it
 * is sealed against shrinking, so that no access can fault, and holds len rounded up to
 * pages; the file the client named by inode. 0 or -errno. */
static int map_client_memfd(struct rm_channel *s, int fd, const Remora__HostShare *m, void **map, size_t *map_len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	const char *why = NULL;
	size_t len = (size_t)((m->length + page - 1) & ~(uint64_t)(page - 1));
	if (seals < 0)
		why = "not a memfd";
	else if (!(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_SEAL))
		why = "not sealed against shrinking";
	else if (fstat(fd, &st) || !S_ISREG(st.st_mode))
		why = "not a file";
	else if ((uint64_t)st.st_ino != m->inode)
		why = "not the file the share names";
	else if (!len || (uint64_t)st.st_size < len)
		why = "smaller than the region";
	if (why) {
		rm_session_log(s, RM_LOG_WARN, "refused to share pinned region 0x%llx (%llu bytes): its memfd is %s",
		               (unsigned long long)m->addr, (unsigned long long)m->length, why);
		return -EINVAL;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;
		rm_session_log(s, RM_LOG_WARN, "refused to share pinned region 0x%llx: mapping its memfd: %s",
		               (unsigned long long)m->addr, strerror(-err));
		return err;
	}
	*map = p;
	*map_len = len;
	return 0;
}

/* Checks the share against the session's bounds and that it overlaps no shared region;
 * under shared_lock (written). */
static CUresult admit_locked(struct rm_channel *s, const Remora__HostShare *m, size_t map_len)
{
	struct rm_session *sh = s->sh;
	const char *why = NULL;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	int i = region_at(sh, m->addr);
	if (m->addr + m->length < m->addr || (i < sh->nshared && sh->shared[i].addr < m->addr + m->length) ||
	    (i > 0 && sh->shared[i - 1].addr + sh->shared[i - 1].len > m->addr))
		why = "it overlaps a region shared already", r = CUDA_ERROR_INVALID_VALUE;
	else if (!sh->shared_limit)
		why = "shared_pinned_limit is 0";
	else if (map_len > sh->shared_limit || sh->shared_bytes > sh->shared_limit - map_len)
		why = "it would pass shared_pinned_limit";
	else if (sh->nshared >= RM_MAX_SHARED_REGIONS)
		why = "the session shares the most regions it may";
	if (!why)
		return CUDA_SUCCESS;
	rm_session_log(s, r == CUDA_ERROR_OUT_OF_MEMORY ? RM_LOG_INFO : RM_LOG_WARN,
	               "pinned region 0x%llx (%llu bytes) not shared: %s (%llu of %llu bytes shared); "
	               "its copies go over the connection",
	               (unsigned long long)m->addr, (unsigned long long)m->length, why,
	               (unsigned long long)sh->shared_bytes, (unsigned long long)sh->shared_limit);
	return r;
}

static CUresult share(struct rm_channel *s, const Remora__HostShare *m)
{
	struct rm_session *sh = s->sh;
	int fd = rm_conn_recv_fd(s->link.conn, FD_WAIT_MS);
	if (fd < 0) {
		rm_session_log(s, RM_LOG_WARN, "refused to share pinned region 0x%llx: no memfd came with it (%s)",
		               (unsigned long long)m->addr, rm_transport_why(fd));
		return fd == -EOPNOTSUPP ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	}
	void *map = NULL;
	size_t map_len = 0;
	int err = map_client_memfd(s, fd, m, &map, &map_len);
	close(fd); /* the mapping holds the file */
	if (err)
		return err == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	if (!s->cur) { /* registering needs a context; the client then has none either */
		munmap(map, map_len);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	pthread_rwlock_wrlock(&sh->shared_lock);
	CUresult r = admit_locked(s, m, map_len);
	struct rm_shared_region *grown = NULL;
	if (r == CUDA_SUCCESS && !(grown = realloc(sh->shared, (size_t)(sh->nshared + 1) * sizeof(*grown))))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (grown)
		sh->shared = grown;
	if (r == CUDA_SUCCESS) {
		r = rm_drv_cuMemHostRegister_v2(map, map_len, CU_MEMHOSTREGISTER_PORTABLE);
		if (r != CUDA_SUCCESS)
			rm_session_log(s, RM_LOG_WARN,
			               "pinned region 0x%llx (%llu bytes) not shared: the driver "
			               "refused to register it (error %d)",
			               (unsigned long long)m->addr, (unsigned long long)m->length, (int)r);
	}
	if (r == CUDA_SUCCESS) {
		int i = region_at(sh, m->addr);
		memmove(&sh->shared[i + 1], &sh->shared[i], (size_t)(sh->nshared - i) * sizeof(*sh->shared));
		sh->shared[i] = (struct rm_shared_region){.addr = m->addr, .len = m->length, .map = map, .map_len = map_len};
		sh->nshared++;
		sh->shared_bytes += map_len;
		rm_session_log(s, RM_LOG_INFO, "shared pinned region 0x%llx, %llu bytes (%llu of %llu bytes shared)",
		               (unsigned long long)m->addr, (unsigned long long)m->length,
		               (unsigned long long)sh->shared_bytes, (unsigned long long)sh->shared_limit);
	} else {
		munmap(map, map_len);
	}
	pthread_rwlock_unlock(&sh->shared_lock);
	return r;
}

void rm_handle_host_share(struct rm_channel *s, struct rm_request *rq)
{
	Remora__HostShare *m = (void *)rm_request_unpack(rq, &remora__host_share__descriptor);
	if (!m)
		return;
	rm_request_finish(s, rq, share(s, m), NULL);
	protobuf_c_message_free_unpacked(&m->base, NULL);
}

void rm_handle_host_unshare(struct rm_channel *s, struct rm_request *rq)
{
	Remora__HostShare *m = (void *)rm_request_unpack(rq, &remora__host_share__descriptor);
	if (!m)
		return;
	struct rm_session *sh = s->sh;
	struct rm_shared_region gone = {0};
	pthread_rwlock_wrlock(&sh->shared_lock);
	int i = region_at(sh, m->addr);
	int found = i < sh->nshared && sh->shared[i].addr == m->addr;
	if (found) {
		gone = sh->shared[i];
		memmove(&sh->shared[i], &sh->shared[i + 1], (size_t)(sh->nshared - i - 1) * sizeof(*sh->shared));
		sh->nshared--;
		sh->shared_bytes -= gone.map_len;
	}
	pthread_rwlock_unlock(&sh->shared_lock);
	/* No new copy finds it now; those queued before finish before it is unregistered,
	 * as the GPU may still be reading or writing it. */
	CUresult r = found ? rm_session_synchronize_all(s) : CUDA_ERROR_INVALID_VALUE;
	if (found)
		unregister_later(s, &gone);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&m->base, NULL);
}

int rm_shared_host_release_all(struct rm_channel *s, uint64_t *bytes)
{
	struct rm_session *sh = s->sh;
	int n = sh->nshared;
	*bytes = sh->shared_bytes;
	for (int i = 0; i < n; i++)
		unregister(s, &sh->shared[i]);
	free(sh->shared);
	sh->shared = NULL;
	sh->nshared = 0;
	sh->shared_bytes = 0;
	return n;
}

void rm_shared_copy(struct rm_channel *s, struct rm_request *rq, int to_device, uint64_t dptr, uint64_t region,
		    uint64_t off, uint64_t n, uint64_t stream_v, int wait)
{
	struct rm_session *sh = s->sh;
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "daemon", rm_op_names[rq->frame.op], n);
	prof.host = "shared";
	CUstream stream = NULL;
	CUresult r = rq->frame.bulk_len ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; /* a shared copy has no bulk */
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, stream_v, rq->frame.flags, &stream);
	if (r == CUDA_SUCCESS)
		r = rm_session_check_range(s, dptr, n);
	/* A capture would keep the mapping's address in a graph that may outlive the share:
	 * the client copies over the connection while it captures. */
	if (r == CUDA_SUCCESS && s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 &&
	    rm_capture_active(stream))
		r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (r == CUDA_SUCCESS) {
		pthread_rwlock_rdlock(&sh->shared_lock);
		int i = region_at(sh, region);
		const struct rm_shared_region *g = i < sh->nshared && sh->shared[i].addr == region ? &sh->shared[i] : NULL;
		if (!g || off > g->len || n > g->len - off) {
			rm_session_log(s, RM_LOG_WARN,
			               "refused a copy of %llu bytes at offset %llu of shared region "
			               "0x%llx: %s",
			               (unsigned long long)n, (unsigned long long)off, (unsigned long long)region,
			               g ? "past its end" : "not shared");
			r = CUDA_ERROR_INVALID_VALUE;
		} else {
			uint64_t mark = rm_copy_profile_mark(&prof);
			void *host = (uint8_t *)g->map + off;
			r = to_device ? rm_drv_cuMemcpyHtoDAsync_v2(dptr, host, n, stream)
				      : rm_drv_cuMemcpyDtoHAsync_v2(host, dptr, n, stream);
			rm_copy_profile_add(&prof, &prof.dma, mark);
		}
		pthread_rwlock_unlock(&sh->shared_lock);
	}
	if (r == CUDA_SUCCESS) {
		struct rm_usage *u = &rm_registry()->clients[s->sh->slot].usage;
		rm_usage_add(to_device ? &u->bytes_htod : &u->bytes_dtoh, n);
	}
	if (r == CUDA_SUCCESS && wait) {
		uint64_t mark = rm_copy_profile_mark(&prof);
		r = rm_stream_wait(s, stream);
		rm_copy_profile_add(&prof, &prof.wait, mark);
	}
	rm_request_finish(s, rq, r, NULL);
	rm_copy_profile_end(&prof);
}
