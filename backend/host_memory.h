/* Host memory a worker holds for its clients (images being received, staging buffers),
 * counted against one bound per worker so that no client can make it grow without end. */
#ifndef REMORA_HOST_MEMORY_H
#define REMORA_HOST_MEMORY_H

#include <stdint.h>

/* The worker's bound in bytes; 0: none. Set once, before any session starts. */
void rm_host_memory_set_limit(uint64_t bytes);
/* Takes bytes from the bound: 0, or -ENOMEM (and nothing taken) when it would pass it. */
int rm_host_memory_take(uint64_t bytes);
/* Gives back bytes taken before. */
void rm_host_memory_give(uint64_t bytes);
/* Bytes taken now. */
uint64_t rm_host_memory_held(void);

#endif
