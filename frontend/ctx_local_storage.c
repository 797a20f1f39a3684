/* ctx_local_storage.c - the private table c693336e (export_tables.h): context-local storage,
 * values that cudart keeps per context under a key of its own, with a destructor run when the
 * context goes away. It has no size element. */
#include "export_tables.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef void (*cls_dtor)(CUcontext ctx, void *key, void *value);

struct cls_entry {
    CUcontext ctx;
    void *key;
    void *value;
    cls_dtor dtor;
};

static struct {
    pthread_mutex_t lock;
    struct cls_entry *v;
    size_t n, cap;
} cls = { .lock = PTHREAD_MUTEX_INITIALIZER };

static CUresult cls_resolve(CUcontext *ctx)
{
    if (*ctx)
        return CUDA_SUCCESS;
    CUresult r = cuCtxGetCurrent(ctx);
    if (r == CUDA_SUCCESS && !*ctx)
        r = CUDA_ERROR_INVALID_CONTEXT;
    return r;
}

/* Call with cls.lock held; keeps registration order. */
static void cls_remove(size_t i)
{
    memmove(&cls.v[i], &cls.v[i + 1], (cls.n - i - 1) * sizeof cls.v[0]);
    cls.n--;
}

/* Call with cls.lock held. */
static struct cls_entry *cls_find(CUcontext ctx, void *key)
{
    for (size_t i = 0; i < cls.n; i++)
        if (cls.v[i].ctx == ctx && cls.v[i].key == key)
            return &cls.v[i];
    return NULL;
}

/* [0] (ctx or NULL for current, key, value, dtor): adds key; INVALID_HANDLE if it exists.
 * dtor(ctx, key, value) runs when the context goes away, not on delete. */
static CUresult cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor)
{
    CUresult r = cls_resolve(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cls.lock);
    if (cls_find(ctx, key)) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (cls.n == cls.cap) {
        size_t cap = cls.cap ? 2 * cls.cap : 8;
        struct cls_entry *v = realloc(cls.v, cap * sizeof *v);
        if (v) {
            cls.v = v;
            cls.cap = cap;
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r == CUDA_SUCCESS)
        cls.v[cls.n++] = (struct cls_entry){ ctx, key, value, dtor };
    pthread_mutex_unlock(&cls.lock);
    return r;
}

/* [1] (ctx or NULL, key): forgets key without running its dtor; INVALID_HANDLE if absent. */
static CUresult cls_delete(CUcontext ctx, void *key)
{
    CUresult r = cls_resolve(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cls.lock);
    struct cls_entry *e = cls_find(ctx, key);
    if (e)
        cls_remove((size_t)(e - cls.v));
    else
        r = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&cls.lock);
    return r;
}

/* [2] (void **value, ctx or NULL, key): the value; INVALID_HANDLE, *value untouched, if absent.
 * Called at the start of every runtime API call. */
static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
    CUresult r = cls_resolve(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cls.lock);
    struct cls_entry *e = cls_find(ctx, key);
    if (e)
        *value = e->value;
    else
        r = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&cls.lock);
    return r;
}

void (*const rm_ctx_local_storage_table[3])(void) = {
    (void (*)(void))cls_put,
    (void (*)(void))cls_delete,
    (void (*)(void))cls_get,
};

void rm_ctx_local_storage_release(CUcontext ctx)
{
    /* Newest entry first, each dtor run outside the lock: a dtor may call back into the table. */
    for (int found = 1; found;) {
        struct cls_entry gone = { 0 };
        found = 0;
        pthread_mutex_lock(&cls.lock);
        for (size_t i = cls.n; i-- > 0 && !found;) {
            if (cls.v[i].ctx == ctx) {
                gone = cls.v[i];
                cls_remove(i);
                found = 1;
            }
        }
        pthread_mutex_unlock(&cls.lock);
        if (found && gone.dtor)
            gone.dtor(ctx, gone.key, gone.value);
    }
}
