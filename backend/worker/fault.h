/* A worker's fault: the first sticky error any of its GPU contexts met (docs/sharing.md,
 * "Faults"). NVIDIA's driver keeps such an error for the rest of the process's life, in
 * every context of the process, so a worker that meets one is retired: the accepting
 * process starts a fresh worker for the tenant's next client (registry.h), while this one
 * goes on only to answer its clients, each call with the sticky error, and to release
 * their sessions; it exits once the last has left. */
#ifndef REMORA_FAULT_H
#define REMORA_FAULT_H

#include <cuda.h>
#include <stddef.h>

struct rm_channel;

/* Whether r is an error after which the driver leaves the process's contexts unusable. */
int rm_fault_is_sticky(CUresult r);
/* Notes result r of a driver call made for session s (NULL: the worker's own check). The
 * first sticky one faults the worker: logged, marked in the registry for the accepting
 * process, and s recorded as the client it was first reported to. */
void rm_fault_note(const struct rm_channel *s, CUresult r);
/* Whether the worker's contexts are clients of NVIDIA MPS (tenant_isolation = mps, mps.h):
 * there a fatal fault breaks every MPS client of the GPU, whichever tenant it came from. */
int rm_fault_under_mps(void);
/* The sticky error the worker faulted with; CUDA_SUCCESS while it has not. */
CUresult rm_fault_error(void);
/* How long ago the worker faulted, in ms; 0 when it has not. */
unsigned long long rm_fault_age_ms(void);
/* The one line a client other than the one the fault was first reported to is told, into
 * buf: the cause (the program, its pid, the error) and what follows from it; under MPS
 * every client, that one included, is told that the fault broke every MPS client of the
 * GPU. Returns its length, 0 where s needs no telling: no fault, s is that client (not
 * under MPS), or s's process was told already (on any of its channels). */
size_t rm_fault_notice(struct rm_channel *s, char *buf, size_t len);

/* Forgets the fault: for the request fuzzer (tests/fuzz) once it has reset the test
 * driver's contexts (rm_gpu_reset), never in remorad. */
void rm_fault_clear(void);

#endif
