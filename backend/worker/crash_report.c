/* A worker that crashes says where (crash_report.h): the signal and its stack, on stderr
 * (remorad's log), before it dies of the signal as it would have; the accepting process
 * then logs its end and gives its tenant's next client a fresh worker. */
#include "crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fatal(int sig)
{
	char line[96];
	int n = snprintf(line, sizeof(line), "remorad[%d] error: worker crashed: signal %d (%s); its stack:\n", (int)getpid(),
			 sig, sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
			      : sig == SIGILL ? "SIGILL" : "SIGABRT");
	if (n > 0 && write(2, line, (size_t)n) < 0)
		_exit(128 + sig);
	void *frames[64];
	backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
	signal(sig, SIG_DFL); /* SA_RESETHAND did already; raised again, it ends the process */
	raise(sig);
}

void rm_crash_report_install(void)
{
	void *warm[1];
	backtrace(warm, 1); /* loads the unwinder now: not inside the handler */
	static char stack[64 * 1024];
	stack_t ss = {.ss_sp = stack, .ss_size = sizeof(stack)};
	sigaltstack(&ss, NULL); /* a stack overflow still reports, on the thread that installed it */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal;
	sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		sigaction(fatal[i], &sa, NULL);
}
