/* The pool's base64 (pool/base64.c) on what etcd, or a stranger posing as it, may send:
 * RFC 4648's vectors, padded and unpadded, and text that is not base64. Built with
 * AddressSanitizer where the compiler has it, so a write past a buffer fails the test. */
#include "base64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void decodes(const char *in, const char *want)
{
	char *got = rm_base64_decode_text(in);
	if (!want ? got != NULL : !got || strcmp(got, want)) {
		fprintf(stderr, "FAIL decode \"%s\": got %s%s%s, want %s\n", in, got ? "\"" : "", got ? got : "NULL",
			got ? "\"" : "", want ? want : "NULL");
		failures++;
	}
	free(got);
}

int main(void)
{
	/* RFC 4648 section 10, padded and without padding (lengths 4k+2 and 4k+3 included). */
	static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *const padded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	static const char *const bare[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		decodes(padded[i], plain[i]);
		decodes(bare[i], plain[i]);
		char *enc = rm_base64_encode((const unsigned char *)plain[i], strlen(plain[i]));
		if (!enc || strcmp(enc, padded[i])) {
			fprintf(stderr, "FAIL encode \"%s\": got %s\n", plain[i], enc ? enc : "NULL");
			failures++;
		}
		free(enc);
	}
	/* Not base64: refused, never decoded past its buffer. */
	static const char *const bad[] = {"Z", "Zm9vY", "Zm9v=", "Zg=a", "Zg===", "Z===", "Zm 9v", "Zm9v!A==", "AA=="};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		decodes(bad[i], NULL);
	/* Every unpadded length around a larger value. */
	char text[301], *enc;
	for (size_t n = 0; n < 300; n++) {
		for (size_t k = 0; k < n; k++)
			text[k] = (char)('a' + k % 26);
		text[n] = 0;
		if (!(enc = rm_base64_encode((const unsigned char *)text, n)))
			return 1;
		enc[strcspn(enc, "=")] = 0;
		decodes(enc, text);
		free(enc);
	}
	if (!failures)
		printf("base64: ok\n");
	return failures ? 1 : 0;
}
