/* The shared-memory transport's settings (unix:PATH; shm.c). */
#ifndef REMORA_SHM_H
#define REMORA_SHM_H

#include <stdint.h>

/* The largest ring the accepting end maps from a dialer (remorad's shm_ring_max): a
 * dialer whose memfd or either ring is larger is refused at set-up, before anything of it
 * is mapped. Set once, before the first accept; by default SHM_RING_MAX (64 MiB). */
void rm_shm_set_ring_max(uint64_t bytes);

#endif
