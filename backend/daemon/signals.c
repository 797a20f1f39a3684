/* Signals taken by a thread (signals.h). */
#include "signals.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static struct rm_signal_pipe *routes[NSIG];

static void on_signal(int sig)
{
	int saved = errno;
	struct rm_signal_pipe *p = routes[sig];
	char c = (char)sig;
	p->caught = sig;
	ssize_t n = write(p->fd[1], &c, 1); /* full: a wake-up is pending already */
	(void)n;
	errno = saved;
}

int rm_signal_pipe_open(struct rm_signal_pipe *p)
{
	p->caught = 0;
	if (pipe2(p->fd, O_CLOEXEC))
		return -errno;
	if (fcntl(p->fd[1], F_SETFL, O_NONBLOCK)) {
		int err = -errno;
		close(p->fd[0]);
		close(p->fd[1]);
		p->fd[0] = p->fd[1] = -1;
		return err;
	}
	return 0;
}

int rm_signal_route(int sig, struct rm_signal_pipe *p, int flags)
{
	struct sigaction was;
	if ((flags & RM_SIGNAL_UNLESS_IGNORED) && (sigaction(sig, NULL, &was) || was.sa_handler == SIG_IGN))
		return 0;
	routes[sig] = p;
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = flags & RM_SIGNAL_RESTART ? SA_RESTART : 0};
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
	return 1;
}

void rm_signal_unroute(int sig)
{
	if (!routes[sig])
		return;
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	routes[sig] = NULL;
}

int rm_signal_wait(struct rm_signal_pipe *p)
{
	for (;;) {
		unsigned char c;
		ssize_t n = read(p->fd[0], &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		return n == 1 ? c : 0;
	}
}
