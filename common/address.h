/* Transport addresses as people write them: [SCHEME://]HOST:PORT (transport.h), checked
 * where a setting is read so that a typo is refused with the setting's name instead of
 * failing at the first dial or listen. */
#ifndef REMORA_ADDRESS_H
#define REMORA_ADDRESS_H

#include <stddef.h>

/* 0 when url names a transport of this build and a HOST:PORT (HOST a name, an IPv4
 * address or an IPv6 one, bracketed or not, or empty; PORT 1 to 65535, or 0 where
 * port_zero_ok: a listener's "any free port"), or for unix: a socket path that fits
 * (or @NAME, abstract). Otherwise -EINVAL, with what is wrong in why. */
int rm_address_check(const char *url, int port_zero_ok, char *why, size_t whylen);

#endif
