/* A worker that crashes says where (crash_report.h): the signal and its stack, on stderr
 * (remorad's log), before it dies of the signal as it would have; the accepting process
 * then logs its end and gives its tenant's next client a fresh worker. */
#include "crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "api_ops.h"

/* The signal, the address it was about, and where it struck (the instruction's library
 * and symbol: the stack below may not unwind through a library without unwind tables,
 * the driver's among them), then the stack. */
static __thread uint32_t serving_op = UINT32_MAX;
static __thread uint64_t serving_session;

void rm_crash_note_call(uint32_t op, uint64_t session)
{
	serving_op = op;
	serving_session = session;
}

static void on_fatal(int sig, siginfo_t *info, void *context)
{
	char line[512];
	void *ip = NULL;
#if defined(__x86_64__)
	ip = (void *)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
#else
	(void)context;
#endif
	Dl_info where = {0};
	if (ip)
		dladdr(ip, &where);
	int n = snprintf(line, sizeof(line),
			 "remorad[%d] error: worker crashed: signal %d (%s) at address %p, instruction %p in %s (%s+%#lx); "
			 "its stack:\n", (int)getpid(), sig,
			 sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
			 : sig == SIGILL ? "SIGILL" : "SIGABRT", info ? info->si_addr : NULL, ip,
			 where.dli_fname ? where.dli_fname : "?", where.dli_sname ? where.dli_sname : "?",
			 (unsigned long)((char *)ip - (char *)(where.dli_saddr ? where.dli_saddr : where.dli_fbase)));
	if (n > 0 && write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0)
		_exit(128 + sig);
	/* Before the stack: unwinding through a driver without unwind tables may fault again. */
	const char *op_name = serving_op < RM_OP_LIMIT && rm_op_names[serving_op] ? rm_op_names[serving_op] : "?";
	n = serving_op == UINT32_MAX ? snprintf(line, sizeof(line), "remorad[%d] error: the crashed thread served no call\n",
						 (int)getpid())
				     : snprintf(line, sizeof(line), "remorad[%d] error: the crashed thread served op %u (%s) of "
						 "session %llu\n", (int)getpid(), serving_op, op_name,
						 (unsigned long long)serving_session);
	if (n > 0 && write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0)
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
	sa.sa_sigaction = on_fatal;
	sa.sa_flags = SA_RESETHAND | SA_ONSTACK | SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		sigaction(fatal[i], &sa, NULL);
}
