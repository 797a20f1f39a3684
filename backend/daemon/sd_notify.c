/* sd_notify.c - systemd's readiness protocol, without libsystemd (sd_notify.h). */
#include "sd_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

void rm_sd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(a.sun_path)) {
		rm_log(RM_LOG_WARN, "NOTIFY_SOCKET is not a Unix socket path; systemd is not told \"%s\"", state);
		return;
	}
	memcpy(a.sun_path, path, len);
	if (path[0] == '@')
		a.sun_path[0] = 0; /* the abstract namespace */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&a,
			     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		rm_log(RM_LOG_WARN, "cannot tell systemd \"%s\" through NOTIFY_SOCKET: %s", state, strerror(errno));
	if (fd >= 0)
		close(fd);
}
