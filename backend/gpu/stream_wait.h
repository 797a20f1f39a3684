/* Waiting for a stream's work to finish, as cuStreamSynchronize does, in less time.
 *
 * With the 32 hardware queues remorad asks for, the driver's cuStreamSynchronize after
 * an empty kernel took 9.1 to 10.8 µs a launch + wait pair on an H200; queueing a write
 * of a new value to a word of page-locked host memory behind the work
 * (cuStreamWriteValue32) and watching the word took 7.7 to 8.8 (docs/hotpath.md,
 * "Words the GPU writes"). So a thread that must wait for a busy stream queues such a
 * write and spins on its word for up to gpu_wait_spin_us; the driver's wait takes over
 * where the word cannot be used (a capturing stream, a hardware queue shared with
 * another client's stream in use, a client with threads of its own channels, a driver
 * without stream memory operations), where the write fails and when the spin runs out (a
 * long kernel, a host function, a fault, which stops the stream before the write). The
 * driver's wait also gives the errors: the word is written only after all earlier work of
 * the stream has run. An idle stream is answered by cuStreamQuery, as quickly as by the
 * driver's wait.
 *
 * The write is remorad's own work on the client's stream, done when the wait returns. A
 * client thread with a channel of its own could meanwhile ask cuStreamQuery of that
 * stream, right after it waited for the stream's work itself, and find the write pending
 * where CUDA finds the stream idle: so words are used only while the client's calls all
 * come on its main channel, which runs them one after another.
 *
 * Words belong to a GPU's shared context (cuMemHostAlloc, mapped): a session's main
 * channel takes one per GPU at its first wait there and gives it back when the session
 * ends, so that none is held when a context broken by a fault is reset (gpus.c). */
#ifndef REMORA_STREAM_WAIT_H
#define REMORA_STREAM_WAIT_H

#include <cuda.h>

struct rm_channel;

/* How long a wait watches its word, in µs (0: the driver's wait alone); negative: 60 where
 * this process may run on 4 or more CPUs, else 0 (with fewer, the spinner takes the CPU
 * that the work it waits for may need). Before any session starts. */
void rm_stream_wait_configure(int spin_us);

/* Waits until the work queued on st so far has finished, as cuStreamSynchronize(st), on
 * session thread s with st's context current (s->cur); NULL: the driver's wait. Done, it
 * ends the channel's kernel-time spans on st in host time (rm_kernel_timing_synced), so
 * that no end record is queued on st after the client knows it idle. */
CUresult rm_stream_wait(struct rm_channel *s, CUstream st);

/* Gives back the words session s took (before its contexts are released). */
void rm_stream_wait_release(struct rm_channel *s);

/* Forgets dev's words: its context ctx is about to be reset, and no channel holds one. */
void rm_stream_wait_forget_gpu(int dev, CUcontext ctx);

#endif
