/* Text from a peer made safe for a log line or a terminal. */
#ifndef REMORA_TEXT_H
#define REMORA_TEXT_H

#include <stddef.h>

/* Copies src into dst (cap > 0 bytes, always NUL-terminated), writing each control
 * character, DEL, byte above 0x7f and backslash as a \xNN escape, so that a peer's
 * string can neither end a log line, forge another, nor drive a terminal. An escape is
 * never cut: what does not fit whole is left out. Returns dst. */
char *rm_text_escape(char *dst, size_t cap, const char *src);

#endif
