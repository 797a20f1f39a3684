/* remora-link: the link emulator's tool (link_tool.h). Subcommands:
 *   exec NETNS CMD...            run CMD in the network namespace /run/netns/NETNS (setns:
 *                                the process becomes CMD, no other change of its context)
 *   relay IF_A IF_B DELAY_NS [spin|sleep]   the delay line (link_relay.c)
 *   probe-server ADDR PORT       answer probes (link_probe.c)
 *   probe ADDR PORT SECONDS      print rtt_us= and gbps= of the link to ADDR */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "link_tool.h"

static int exec_in(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: remora-link exec NETNS CMD [ARG...]\n");
		return 2;
	}
	char path[256];
	snprintf(path, sizeof path, "/run/netns/%s", argv[1]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET)) {
		fprintf(stderr, "remora-link exec: network namespace %s: %s\n", argv[1], strerror(errno));
		return 126;
	}
	close(fd);
	execvp(argv[2], argv + 2);
	fprintf(stderr, "remora-link exec: %s: %s\n", argv[2], strerror(errno));
	return 127;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	if (!strcmp(cmd, "exec"))
		return exec_in(argc - 1, argv + 1);
	if (!strcmp(cmd, "relay"))
		return link_relay_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "probe-server"))
		return link_probe_server_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "probe"))
		return link_probe_main(argc - 1, argv + 1);
	fprintf(stderr, "usage: remora-link exec|relay|probe-server|probe ... (bench/link_tool.c)\n");
	return 2;
}
