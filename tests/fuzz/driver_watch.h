/* The request target's watch on what the daemon asks of the driver: entries of rm_drv
 * put in front of the loaded driver's, that count what a session allocates (device memory,
 * pinned host buffers, events) and releases, and abort when a copy or memset reaches
 * past one device allocation. */
#ifndef REMORA_FUZZ_DRIVER_WATCH_H
#define REMORA_FUZZ_DRIVER_WATCH_H

/* Wraps the entries; after rm_driver_table_load, before any session. */
void driver_watch_start(void);

/* Aborts, naming each, if anything allocated since the last call is still held, unless
 * a kernel faulted a GPU's shared context (ngpus of them), which takes it all with it. */
void driver_watch_check_released(int ngpus);

#endif
