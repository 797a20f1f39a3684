/* Fuzz target `image`: the daemon's inspection of a module image a client sends
 * (backend/gpu/image_inspect.c): cubin (ELF), PTX, fatbin and compressed fatbin entries.
 * The image is handed over as the daemon has it: n bytes with a NUL at image[n]. Its device
 * variables are named too (rm_image_variables, for live migration and the quota), and the
 * bytes a GPU would load of it bounded (rm_image_code_bytes, for the quota). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image_cache.h"

static int no_name(const char *name, void *arg)
{
	(void)arg;
	return strlen(name) > (1u << 20); /* a name is a NUL-terminated string within the image */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *image = malloc(size + 1);
	if (!image)
		return 0;
	memcpy(image, data, size);
	image[size] = 0;
	rm_image_shareable(image, size);
	rm_image_variables(image, size, no_name, NULL);
	rm_image_code_bytes(image, size, 90);
	free(image);
	return 0;
}
