/* What a moving client's session holds, checked and sent to the target (migrate_state.h). */
#include "migrate_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "driver_table.h"
#include "handle_alias.h"
#include "image_cache.h"
#include "ipc.h"
#include "migrate.h"
#include "migrate_wire.h"
#include "transport.h"
#include "variable_alias.h"

static const char *const kind_names[] = {
	"none",
#define RM_HANDLE_KIND(name, ctype, step, release) #name,
#include "handle_kinds.def"
#undef RM_HANDLE_KIND
};

/* ---- what moves ---- */


static int gather(const struct rm_handle *h, void *arg)
{
	struct rm_mig_collect *c = arg;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct rm_handle *g = realloc(c->h, cap * sizeof(*g));
		if (!g) {
			snprintf(c->why, sizeof(c->why), "out of memory");
			return 1;
		}
		c->h = g, c->cap = cap;
	}
	c->h[c->n++] = *h;
	return 0;
}

static const enum rm_handle_kind movable[] = {RM_H_MEMORY, RM_H_MOVED_MEMORY, RM_H_VA_RANGE, RM_H_MODULE,
					      RM_H_LIBRARY, RM_H_KERNEL, RM_H_FUNCTION, RM_H_STREAM, RM_H_EVENT};

/* The image kept for a module or library (NULL: none). Used once the client's threads are
 * held (migrate_out.c): none of its calls can unload it meanwhile. */
static const uint8_t *kept_image(struct rm_session *sh, uint64_t handle, size_t *n)
{
	const uint8_t *image = NULL;
	pthread_mutex_lock(&sh->lock);
	for (size_t k = 0; k < sh->nimages && !image; k++)
		if (sh->images[k].module == handle)
			image = sh->images[k].image, *n = sh->images[k].n;
	pthread_mutex_unlock(&sh->lock);
	return image;
}

static int slot_of(const struct rm_handle *h)
{
	return h->ctx ? (int)h->ctx - 1 : 0;
}

/* The names of an image's device variables, each once. */
struct names {
	char **v;
	size_t n, cap;
};

static int add_name(const char *name, void *arg)
{
	struct names *x = arg;
	for (size_t i = 0; i < x->n; i++)
		if (!strcmp(x->v[i], name))
			return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 16;
		char **g = realloc(x->v, cap * sizeof(*g));
		if (!g)
			return -ENOMEM;
		x->v = g, x->cap = cap;
	}
	return (x->v[x->n] = strdup(name)) ? (x->n++, 0) : -ENOMEM;
}

/* rm_image_variables of the image kept for a module or library, and the variables' names
 * (owned by the record), read once per image (0 and none when no image is kept: the send
 * says so). Under the lock, as another thread of the client may unload it meanwhile;
 * during the send the client's threads are held and the names stay. */
static int kept_image_variables(struct rm_session *sh, uint64_t handle, char ***vars, size_t *nvars)
{
	int r = 0;
	*vars = NULL, *nvars = 0;
	pthread_mutex_lock(&sh->lock);
	for (size_t k = 0; k < sh->nimages; k++) {
		struct rm_kept_image *i = &sh->images[k];
		if (i->module != handle)
			continue;
		if (!i->vars_read) {
			struct names names = {0};
			i->vars_result = rm_image_variables(i->image, i->n, add_name, &names);
			i->vars = names.v, i->nvars = names.n;
			i->vars_read = 1;
		}
		r = i->vars_result, *vars = i->vars, *nvars = i->nvars;
	}
	pthread_mutex_unlock(&sh->lock);
	return r;
}

/* The address the client holds for the device variable at p, or 0 where it never asked
 * for it (an alias's where it moved in: variable_alias.h). */
static uint64_t held_variable(struct rm_channel *s, CUdeviceptr p)
{
	uint64_t v = rm_session_client_dptr(s, p);
	struct rm_handle h;
	return rm_session_range_of(s, v, &h) && h.kind == RM_H_GLOBAL && h.value == v ? v : 0;
}

static int count_one(const struct rm_handle *h, void *arg)
{
	(void)h;
	++*(uint32_t *)arg;
	return 0;
}

/* The device variables of module or library h (named as its kept image says), each a
 * record with its contents, read from where the module holds them, and the address the
 * client holds for it. */
static int send_variables(struct rm_mig_sender *x, const struct rm_handle *h, uint64_t client)
{
	struct names names = {0}; /* the record's, read once (kept_image_variables) */
	int library = h->kind == RM_H_LIBRARY;
	int err = kept_image_variables(x->s->sh, h->value, &names.v, &names.n) ? -ENOTSUP : 0;
	if (err)
		x->why = "a module's device variables could not be named";
	if (!err && rm_session_enter(x->s, x->s->sh->ctxs[library ? 0 : slot_of(h)].handle) != CUDA_SUCCESS)
		err = -EIO;
	for (size_t i = 0; i < names.n && !err; i++) {
		CUdeviceptr p = 0;
		size_t sz = 0, nlen = strlen(names.v[i]);
		CUresult r = library ? rm_drv_cuLibraryGetGlobal(&p, &sz, (CUlibrary)(uintptr_t)h->value, names.v[i])
				     : rm_drv_cuModuleGetGlobal_v2(&p, &sz, (CUmodule)(uintptr_t)h->value, names.v[i]);
		/* What the compiler makes for string literals (printf's formats, assert's texts) is
		 * constant and loads again as it was; it need not be found by name. */
		if (r != CUDA_SUCCESS && (names.v[i][0] == '$' || !strncmp(names.v[i], "__unnamed_", 10)))
			continue;
		if (r != CUDA_SUCCESS || nlen > RM_MIG_MAX_NAME) {
			x->why = "a device variable of a module is not found by its name";
			err = -ENOENT;
			break;
		}
		uint8_t f[24], hdr[RM_MIG_HEADER_LEN];
		uint64_t held = held_variable(x->s, p);
		rm_mig_put64(f, client);
		rm_mig_put32(f + 8, (uint32_t)nlen);
		rm_mig_put32(f + 12, (uint32_t)library);
		rm_mig_put64(f + 16, held);
		x->held += held != 0;
		x->records++;
		x->total += sizeof(hdr) + sizeof(f) + nlen + sz;
		if (x->count)
			continue;
		rm_mig_header(hdr, RM_MIG_GLOBAL, sizeof(f) + nlen + sz);
		struct iovec v[3] = {{hdr, sizeof(hdr)}, {f, sizeof(f)}, {names.v[i], nlen}};
		err = rm_conn_sendv(x->conn, v, 3);
		for (uint64_t done = 0; done < sz && !err;) {
			size_t c = rm_mig_piece(p + done, sz - done);
			if (rm_drv_cuMemcpyDtoH_v2(x->chunk, p + done, c) != CUDA_SUCCESS) {
				x->why = "a device variable could not be read";
				err = -EIO;
				break;
			}
			struct iovec d = {x->chunk, c};
			err = rm_conn_sendv(x->conn, &d, 1);
			done += c;
		}
	}
	return err;
}

/* Why s cannot move, or NULL; its handles of the kinds that move gathered into c, in the
 * order they are made again (memory and modules before functions, streams, events). */
const char *rm_mig_refusal(struct rm_channel *s, struct rm_mig_collect *c)
{
	struct rm_session *sh = s->sh;
	for (int i = 1; i <= RM_MAX_CHANNELS; i++)
		if (sh->channels[i] && sh->channels[i]->callbacks)
			return "it runs host functions (a callback channel), which do not move";
	if (sh->nshared)
		return "it shares pinned memory with the worker (unix:); set REMORA_SHARE_PINNED=0 or use tcp:";
	if (rm_ipc_session_shares(s))
		return "it shares memory or events with other clients over CUDA IPC";
	for (int i = 0; i < sh->nctx; i++) {
		if (sh->ctxs[i].created)
			return "it created contexts of its own (cuCtxCreate), which do not move";
		if (__atomic_load_n(&sh->ctxs[i].captures, __ATOMIC_ACQUIRE))
			return "a stream capture is under way";
		if (sh->ctxs[i].pool)
			return "it uses stream-ordered allocation (a memory pool), which does not move";
		if (sh->ctxs[i].limits_set)
			return "it set context limits (cuCtxSetLimit), which do not move";
		if (sh->peer_enabled[i])
			return "it enabled peer access between GPUs, which does not move";
	}
	for (uint32_t k = 1; k < sizeof(kind_names) / sizeof(*kind_names); k++) {
		int moves = k == RM_H_CONTEXT;
		for (size_t j = 0; j < sizeof(movable) / sizeof(*movable); j++)
			moves |= movable[j] == (enum rm_handle_kind)k;
		moves |= k == RM_H_GLOBAL; /* with its module's variables (send_variables) */
		struct rm_mig_collect none = {0};
		if (!moves && rm_session_each(s, (enum rm_handle_kind)k, gather, &none)) {
			free(none.h);
			return "out of memory";
		}
		free(none.h);
		if (none.n) {
			snprintf(c->why, sizeof(c->why), "it holds %zu handle(s) of kind %s, which do not move (docs/pool.md)",
				 none.n, kind_names[k]);
			return c->why;
		}
	}
	for (size_t j = 0; j < sizeof(movable) / sizeof(*movable); j++)
		if (rm_session_each(s, movable[j], gather, c))
			return c->why;
	for (size_t i = 0; i < c->n; i++) {
		const struct rm_handle *h = &c->h[i];
		unsigned int managed = 0;
		if (h->kind == RM_H_MEMORY && rm_drv.cuPointerGetAttribute)
			rm_drv_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, h->value);
		if (managed)
			return "it holds managed memory, which does not move";
		if ((h->kind == RM_H_MEMORY || h->kind == RM_H_MOVED_MEMORY) && (!h->ctx || h->ctx > (uint32_t)sh->nctx))
			return "it holds memory of no context of its own";
		if (h->kind == RM_H_FUNCTION && !rm_session_find(s, RM_H_MODULE, h->parent, NULL) &&
		    !rm_session_find(s, RM_H_KERNEL, h->parent, NULL))
			return "it holds a function of neither a module nor a kernel of its own";
		if (h->kind == RM_H_MODULE && h->parent)
			return "it holds a library's module (cuLibraryGetModule), which does not move";
		char **names;
		size_t nnames;
		int vars = h->kind == RM_H_MODULE || h->kind == RM_H_LIBRARY
				   ? kept_image_variables(s->sh, h->value, &names, &nnames) : 0;
		if (vars == 1)
			return "a module or library of its holds __managed__ variables, which do not move";
		if (vars < 0)
			return "the device variables of a module or library of its cannot be named (an image not "
			       "read that far), so their values could not move";
	}
	return NULL;
}

/* ---- the state on the wire ---- */


static int emit(struct rm_mig_sender *x, uint32_t type, const uint8_t *fixed, size_t nfixed, const void *rest, uint64_t nrest)
{
	uint8_t h[RM_MIG_HEADER_LEN];
	x->records += type != RM_MIG_END && type != RM_MIG_BEGIN;
	x->total += sizeof(h) + nfixed + nrest;
	if (x->count)
		return 0;
	rm_mig_header(h, type, nfixed + nrest);
	struct iovec v[3] = {{h, sizeof(h)}, {(void *)fixed, nfixed}, {(void *)rest, (size_t)nrest}};
	return rm_conn_sendv(x->conn, v, rest ? 3 : 2);
}

static int send_memory(struct rm_mig_sender *x, const struct rm_handle *h)
{
	uint8_t f[24];
	rm_mig_put64(f, h->value);
	rm_mig_put64(f + 8, h->size);
	rm_mig_put32(f + 16, h->ctx - 1);
	rm_mig_put32(f + 20, 0);
	int err = emit(x, RM_MIG_MEMORY, f, sizeof(f), NULL, h->size); /* the contents follow */
	if (err || x->count)
		return err;
	if (rm_session_enter(x->s, x->s->sh->ctxs[h->ctx - 1].handle) != CUDA_SUCCESS)
		return -EIO;
	for (uint64_t done = 0; done < h->size && !err;) {
		size_t n = rm_mig_piece(h->value + done, h->size - done);
		if (rm_drv_cuMemcpyDtoH_v2(x->chunk, h->value + done, n) != CUDA_SUCCESS) {
			x->why = "its memory could not be read";
			return -EIO;
		}
		struct iovec v = {x->chunk, n};
		err = rm_conn_sendv(x->conn, &v, 1);
		done += n;
	}
	return err;
}



static int by_base(const void *a, const void *b)
{
	const struct rm_handle *x = a, *y = b;
	return x->value < y->value ? -1 : x->value > y->value;
}

/* From mem[i] (sorted by base) on, the allocations whose granules of gran bytes touch,
 * merged into one span [*base, *end): the index after them. */
static size_t span_at(const struct rm_handle *mem, size_t n, size_t i, uint64_t gran, uint64_t *base, uint64_t *end)
{
	*base = mem[i].value & ~(gran - 1), *end = mem[i].value + mem[i].size;
	for (i++; i < n && (mem[i].value & ~(gran - 1)) <= ((*end + gran - 1) & ~(gran - 1)); i++)
		*end = mem[i].value + mem[i].size > *end ? mem[i].value + mem[i].size : *end;
	*end = (*end + gran - 1) & ~(gran - 1);
	return i;
}

/* The spans the memory lies in: its allocations' granules, those that touch merged, so
 * that each allocation lies in one span the target maps as one range. */
static int send_spans(struct rm_mig_sender *x)
{
	struct rm_session *sh = x->s->sh;
	size_t n = 0;
	struct rm_handle *mem = malloc((x->c->n + 1) * sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	for (size_t i = 0; i < x->c->n; i++)
		if (x->c->h[i].kind == RM_H_MEMORY || x->c->h[i].kind == RM_H_MOVED_MEMORY)
			mem[n++] = x->c->h[i];
	qsort(mem, n, sizeof(*mem), by_base);
	int err = 0;
	for (size_t i = 0; i < n && !err;) {
		const struct rm_session_ctx *k = &sh->ctxs[mem[i].ctx - 1];
		CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = k->dev}};
		size_t gran = 0;
		if (rm_drv_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
		    !gran || (gran & (gran - 1))) {
			x->why = "the GPU's granularity is unknown";
			err = -EIO;
			break;
		}
		uint64_t base, end;
		uint32_t slot = mem[i].ctx - 1;
		i = span_at(mem, n, i, gran, &base, &end);
		uint8_t f[24];
		rm_mig_put64(f, base);
		rm_mig_put64(f + 8, end - base);
		rm_mig_put32(f + 16, slot);
		rm_mig_put32(f + 20, 0);
		err = emit(x, RM_MIG_SPAN, f, sizeof(f), NULL, 0);
	}
	free(mem);
	return err;
}

int rm_mig_ranges(struct rm_session *sh, uint8_t **out, size_t *count)
{
	*out = NULL, *count = 0;
	pthread_mutex_lock(&sh->lock);
	size_t n = 0;
	for (size_t i = 0; i < sh->handles_cap; i++)
		n += sh->handles[i].kind == RM_H_MEMORY || sh->handles[i].kind == RM_H_MOVED_MEMORY ||
		     sh->handles[i].kind == RM_H_VA_RANGE;
	struct rm_handle *h = malloc((n + 1) * sizeof(*h));
	size_t got = 0;
	for (size_t i = 0; h && i < sh->handles_cap && got < n; i++)
		if (sh->handles[i].kind == RM_H_MEMORY || sh->handles[i].kind == RM_H_MOVED_MEMORY ||
		    sh->handles[i].kind == RM_H_VA_RANGE)
			h[got++] = sh->handles[i];
	pthread_mutex_unlock(&sh->lock);
	uint8_t *list = h ? malloc((got + 1) * RM_MIG_RANGE_LEN) : NULL;
	if (!list) {
		free(h);
		return -ENOMEM;
	}
	/* The reservations first, as the target reserves them (migrate_in.c's on_va_range),
	 * then the memory's spans, in RM_GRANULEs: where a GPU's granules differ, the
	 * state's spans take the ranges held ahead apart again (migrate_memory.c). */
	size_t nmem = 0, k = 0;
	for (size_t i = 0; i < got; i++) {
		if (h[i].kind != RM_H_VA_RANGE) {
			h[nmem++] = h[i];
			continue;
		}
		uint64_t whole = rm_mig_va_range_whole(h[i].value, h[i].size);
		if (whole && k < RM_MIG_MAX_RANGES)
			rm_mig_range_put(list + RM_MIG_RANGE_LEN * k++, h[i].value, whole);
	}
	qsort(h, nmem, sizeof(*h), by_base);
	for (size_t i = 0; i < nmem && k < RM_MIG_MAX_RANGES;) {
		uint64_t base, end;
		i = span_at(h, nmem, i, RM_GRANULE, &base, &end);
		rm_mig_range_put(list + RM_MIG_RANGE_LEN * k++, base, end - base);
	}
	free(h);
	*out = list, *count = k;
	return 0;
}

/* The whole state, sent (or, counting, sized). */
int rm_mig_send_state(struct rm_mig_sender *x)
{
	struct rm_channel *s = x->s;
	struct rm_session *sh = s->sh;
	uint8_t f[24];
	int err;
	x->records = 0, x->total = 0;
	rm_mig_put32(f, RM_MIG_MAGIC);
	rm_mig_put32(f + 4, x->records_expected);
	if ((err = emit(x, RM_MIG_BEGIN, f, 8, NULL, 0)))
		return err;
	for (int i = 0; i < sh->nctx && !err; i++) {
		rm_mig_put64(f, sh->ctxs[i].handle);
		rm_mig_put32(f + 8, 0);
		CUdevice dev = sh->ctxs[i].dev;
		for (int d = 0; d < sh->ndevices; d++) /* the client's ordinal of its device */
			if (sh->devices[d] == dev)
				rm_mig_put32(f + 8, (uint32_t)d);
		rm_mig_put32(f + 12, 0);
		err = emit(x, RM_MIG_CTX, f, 16, NULL, 0);
	}
	if (!err)
		err = send_spans(x);
	for (size_t i = 0; i < x->c->n && !err; i++) {
		const struct rm_handle *h = &x->c->h[i];
		uint64_t client = rm_session_out_value(s, (enum rm_handle_kind)h->kind, h->value);
		switch (h->kind) {
		case RM_H_MEMORY:
		case RM_H_MOVED_MEMORY:
			err = send_memory(x, h);
			break;
		case RM_H_VA_RANGE: /* empty: a mapping in it (RM_H_MAPPING) does not move */
			rm_mig_put64(f, h->value);
			rm_mig_put64(f + 8, h->size);
			err = emit(x, RM_MIG_VA_RANGE, f, 16, NULL, 0);
			break;
		case RM_H_LIBRARY:
		case RM_H_MODULE: {
			size_t n = 0;
			const uint8_t *image = kept_image(sh, h->value, &n);
			if (!image) {
				x->why = "a module's or library's image was not kept";
				return -ENOENT;
			}
			if (h->kind == RM_H_LIBRARY) {
				rm_mig_put64(f, client);
				rm_mig_put64(f + 8, 0);
				err = emit(x, RM_MIG_LIBRARY, f, 16, image, n);
				if (!err)
					err = send_variables(x, h, client);
				break;
			}
			rm_mig_put64(f, client);
			rm_mig_put32(f + 8, (uint32_t)slot_of(h));
			rm_mig_put32(f + 12, 0);
			err = emit(x, RM_MIG_MODULE, f, 16, image, n);
			if (!err)
				err = send_variables(x, h, client);
			break;
		}
		case RM_H_KERNEL: {
			const char *name = NULL;
			if (rm_drv_cuKernelGetName(&name, (CUkernel)(uintptr_t)h->value) != CUDA_SUCCESS || !name || !*name ||
			    strlen(name) > RM_MIG_MAX_NAME) {
				x->why = "a kernel's name is unknown";
				return -ENOENT;
			}
			int smem = 0, carveout = -1;
			if (sh->nctx) {
				rm_drv_cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
							    (CUkernel)(uintptr_t)h->value, sh->ctxs[0].dev);
				rm_drv_cuKernelGetAttribute(&carveout, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
							    (CUkernel)(uintptr_t)h->value, sh->ctxs[0].dev);
			}
			rm_mig_put64(f, client);
			rm_mig_put64(f + 8, rm_session_out_value(s, RM_H_LIBRARY, h->parent));
			rm_mig_put32(f + 16, (uint32_t)smem);
			rm_mig_put32(f + 20, (uint32_t)carveout);
			err = emit(x, RM_MIG_KERNEL, f, 24, name, strlen(name));
			break;
		}
		case RM_H_FUNCTION: {
			const char *name = NULL;
			if (rm_session_find(s, RM_H_KERNEL, h->parent, NULL)) { /* cuKernelGetFunction's */
				rm_mig_put64(f, client);
				rm_mig_put64(f + 8, rm_session_out_value(s, RM_H_KERNEL, h->parent));
				rm_mig_put32(f + 16, (uint32_t)slot_of(h));
				rm_mig_put32(f + 20, 0);
				err = emit(x, RM_MIG_KERNEL_FUNCTION, f, 24, NULL, 0);
				break;
			}
			if (rm_drv_cuFuncGetName(&name, (CUfunction)(uintptr_t)h->value) != CUDA_SUCCESS || !name ||
			    !*name || strlen(name) > RM_MIG_MAX_NAME) {
				x->why = "a function's name is unknown";
				return -ENOENT;
			}
			/* What the client may have set: the dynamic shared memory a launch may ask for,
			 * the carveout (cuFuncSetAttribute). */
			int smem = 0, carveout = -1;
			rm_drv_cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
						  (CUfunction)(uintptr_t)h->value);
			rm_drv_cuFuncGetAttribute(&carveout, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
						  (CUfunction)(uintptr_t)h->value);
			rm_mig_put64(f, client);
			rm_mig_put64(f + 8, rm_session_out_value(s, RM_H_MODULE, h->parent));
			rm_mig_put32(f + 16, (uint32_t)smem);
			rm_mig_put32(f + 20, (uint32_t)carveout);
			err = emit(x, RM_MIG_FUNCTION, f, 24, name, strlen(name));
			break;
		}
		case RM_H_STREAM: {
			int prio = 0, blocking = 0;
			struct rm_session_ctx *k = &sh->ctxs[slot_of(h)];
			rm_drv_cuStreamGetPriority((CUstream)(uintptr_t)h->value, &prio);
			pthread_mutex_lock(&k->order_lock);
			for (int b = 0; b < k->nblocking; b++)
				blocking |= k->blocking[b].stream == (CUstream)(uintptr_t)h->value;
			pthread_mutex_unlock(&k->order_lock);
			rm_mig_put64(f, client);
			rm_mig_put32(f + 8, (uint32_t)slot_of(h));
			rm_mig_put32(f + 12, blocking ? 0 : CU_STREAM_NON_BLOCKING);
			rm_mig_put32(f + 16, (uint32_t)prio);
			rm_mig_put32(f + 20, 0);
			err = emit(x, RM_MIG_STREAM, f, 24, NULL, 0);
			break;
		}
		case RM_H_EVENT:
			rm_mig_put64(f, client);
			rm_mig_put32(f + 8, (uint32_t)slot_of(h));
			rm_mig_put32(f + 12, (uint32_t)h->size);
			err = emit(x, RM_MIG_EVENT, f, 16, NULL, 0);
			break;
		}
	}
	uint32_t globals = 0;
	if (!err && x->count && (rm_session_each(s, RM_H_GLOBAL, count_one, &globals) || globals != x->held)) {
		x->why = "a device variable whose address it holds is not among its modules' named variables";
		return -ENOENT;
	}
	return err ? err : emit(x, RM_MIG_END, f, 0, NULL, 0);
}

