/* Module and library images shared between the clients of a worker.
 *
 * Loading code into a context waits for every kernel running in it and holds up
 * launches meanwhile (measured on an H200: a load behind a 450 ms kernel took
 * 348 ms, and another stream's launch waited 298 ms). In a context shared by many
 * clients that serializes them, so an image is loaded once per worker and each
 * client that loads the same bytes gets the loaded handle, as long as sharing
 * cannot be observed: the image holds no device state a client could write
 * (no __device__ or __managed__ variables, no user __constant__ banks). Other
 * images are loaded for each client, as is a client's second load of an image it holds
 * (rm_image_load_unshared: two loads are two modules). */
#ifndef REMORA_IMAGE_CACHE_H
#define REMORA_IMAGE_CACHE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "session.h"

/* Loads image (n bytes, NUL-terminated at image[n]) as a module of the current
 * context (kind RM_H_MODULE) or as a library (RM_H_LIBRARY), sharing a loaded
 * copy when the image allows; *shared says whether it did. */
CUresult rm_image_load(enum rm_handle_kind kind, const uint8_t *image, size_t n, void **out, int *shared);
/* Loads image as rm_image_load does, a copy of its own whether or not it could be shared. */
CUresult rm_image_load_unshared(enum rm_handle_kind kind, const uint8_t *image, void **out);
/* Loads every function of a module or library (kind) into the current context, under the
 * driver's lazy loading (module_loading = context): where an eager load would go into
 * every context of the worker. Best effort: a function left unloaded loads at its first
 * launch, as lazily loaded code does. */
void rm_image_load_here(enum rm_handle_kind kind, void *handle);
/* Turns rm_image_load_here on (a worker's start, module_loading = context). */
void rm_image_load_here_configure(int on);
/* Ends one client's use of a module or library; the driver unloads it once no
 * client uses it (a shared image may stay loaded for the next client). */
CUresult rm_image_unload(enum rm_handle_kind kind, void *handle);

/* Forgets the modules of a context that is being reset (the reset unloads them). */
void rm_image_forget_context(CUcontext ctx);

/* Whether clients may share one loaded copy of image: a cubin, PTX or fatbin
 * (zstd or LZ4 entries are examined when libzstd.so.1 or liblz4.so.1 can be
 * loaded) with no writable device state. 0 when in doubt. */
int rm_image_shareable(const uint8_t *image, size_t n);
/* Whether every table and section an image's headers name lies within its n bytes,
 * which the driver takes on trust (cuModuleLoadData has no length): an ELF's header
 * tables and sections, a fatbin's entries. A fatbin wrapper, which holds a pointer, is
 * never contained. Anything else is taken as text. */
int rm_image_contained(const uint8_t *image, size_t n);

/* Names each device variable image holds (a cubin's symbols that lie in state sections,
 * PTX's module-scope .global and .const declarations, each entry of a fatbin: names may
 * repeat), calling visit(name, arg). 0; 1 when it also holds __managed__ variables; -1
 * when it cannot be read that far (its variables unknown); else visit's nonzero. */
int rm_image_variables(const uint8_t *image, size_t n, int (*visit)(const char *name, void *arg), void *arg);
/* The bytes of code and data a GPU of compute capability sm (major * 10 + minor) loads
 * from image: of a fatbin, the entry the driver picks (the highest cubin of sm's major not
 * above it, else the highest PTX not above it, else the largest entry), as uncompressed;
 * of a cubin or PTX, its n bytes. An upper bound of what the module holds on the device
 * besides its variables (the driver's lazy loading may hold less). */
uint64_t rm_image_code_bytes(const uint8_t *image, size_t n, unsigned sm);

#endif
