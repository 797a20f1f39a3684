/* Fuzz target `base64` (pool/base64.c), over what etcd's gateway may send as a key or
 * value. The input is decoded as text (up to its first NUL); whatever decodes must
 * survive encode and decode unchanged. Then the input's bytes up to that NUL, encoded,
 * must decode back to themselves, padded or with the padding stripped. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"

static void check_decodes_to(const char *text, const char *want)
{
	char *got = rm_base64_decode_text(text);
	if (!got || strcmp(got, want))
		abort();
	free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	size_t len = strlen(text);

	char *decoded = rm_base64_decode_text(text);
	if (decoded) {
		char *enc = rm_base64_encode((const unsigned char *)decoded, strlen(decoded));
		if (!enc)
			abort();
		check_decodes_to(enc, decoded);
		free(enc);
		free(decoded);
	}

	char *enc = rm_base64_encode((const unsigned char *)text, len);
	if (!enc || strlen(enc) != (len + 2) / 3 * 4)
		abort();
	check_decodes_to(enc, text);
	enc[strcspn(enc, "=")] = 0;
	check_decodes_to(enc, text);
	free(enc);
	free(text);
	return 0;
}
