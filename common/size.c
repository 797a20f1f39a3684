#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <strings.h>

int rm_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno || *s == '-')
		return -1;
	int shift = 0;
	switch (toupper((unsigned char)*end)) {
	case 0: break;
	case 'K': shift = 10; break;
	case 'M': shift = 20; break;
	case 'G': shift = 30; break;
	case 'T': shift = 40; break;
	default: return -1;
	}
	if (*end && end[1] && strcasecmp(end + 1, "B") && strcasecmp(end + 1, "iB"))
		return -1;
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}
