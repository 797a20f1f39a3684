/* Signals taken by a thread: the handler only notes the signal and writes its number to a
 * pipe, and a thread of the process, woken by it, does what a handler may not (stopping,
 * reloading, telling clients). The accepting process routes SIGTERM, SIGINT and SIGHUP so,
 * a worker SIGTERM. */
#ifndef REMORA_SIGNALS_H
#define REMORA_SIGNALS_H

#include <signal.h>

struct rm_signal_pipe {
	int fd[2];
	volatile sig_atomic_t caught; /* the last signal routed here; 0: none yet */
};

#define RM_SIGNAL_RESTART 1        /* calls the signal interrupts restart (SA_RESTART) */
#define RM_SIGNAL_UNLESS_IGNORED 2 /* not where it is ignored (a shell's background job) */

/* Opens p's pipe: close-on-exec, its writes never block (a full pipe has a wake-up
 * pending already). 0, or -errno. */
int rm_signal_pipe_open(struct rm_signal_pipe *p);
/* Routes sig to p (flags above): 1, or 0 where RM_SIGNAL_UNLESS_IGNORED left it ignored. */
int rm_signal_route(int sig, struct rm_signal_pipe *p, int flags);
/* Gives a routed sig its default action back (a child about to exec, or a process that
 * lets the signal end it now); a signal not routed is left as it is. */
void rm_signal_unroute(int sig);
/* Waits for a signal routed to p: its number, or 0 once the pipe fails or is closed. */
int rm_signal_wait(struct rm_signal_pipe *p);

#endif
