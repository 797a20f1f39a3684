/* What a client's loaded module or library holds on the device, charged to its memory
 * quota while it is loaded (docs/sharing.md, "Quotas"). */
#ifndef REMORA_IMAGE_CHARGE_H
#define REMORA_IMAGE_CHARGE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "handles.h"
#include "quota.h"

struct rm_channel;

/* Charges the client for module or library h (owned, loaded from image's n bytes;
 * shared: the worker's one copy, which holds no variables): its code, as
 * rm_image_code_bytes bounds it for the GPU it runs on, and its variables (__device__,
 * __managed__, user __constant__) as the driver sized them, each named in the image
 * (rm_image_variables) and asked of the driver in the current context, or for a library
 * loaded with none, in the shared context of the client's first GPU. The charge is kept
 * in h's record (its size field) for rm_image_uncharge. CUDA_ERROR_OUT_OF_MEMORY past a
 * quota (nothing charged). */
CUresult rm_image_charge(struct rm_channel *s, enum rm_handle_kind kind, void *h, const uint8_t *image, size_t n,
			 int shared);
/* rm_image_charge of h, owned first if it is not yet; on failure h is forgotten and unloaded. */
CUresult rm_image_own_charged(struct rm_channel *s, enum rm_handle_kind kind, void *h, const uint8_t *image, size_t n,
			      int shared);
/* Loads image (rm_image_load) as a module or library the session owns, charged as above. A
 * shared copy the session already holds is loaded again for it: two loads are two modules,
 * as in CUDA, and unloading one leaves the other. */
CUresult rm_image_load_owned(struct rm_channel *s, enum rm_handle_kind kind, const uint8_t *image, size_t n, void **h);
/* Gives back what rm_image_charge charged for the record h (a module's or library's). */
static inline void rm_image_uncharge(struct rm_channel *s, const struct rm_handle *h)
{
	rm_session_uncharge(s, h->size);
}

#endif
