/* Reading frames off a link (common/link.c): exact reads across the buffer, zero-length
 * reads with no buffer (every empty message), skips, and a peer that closes mid-read.
 * Built with UndefinedBehaviorSanitizer where the compiler has it. */
#include "link.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "expect.h"

int main(void)
{
	int sv[2];
	struct rm_conn *conn;
	struct rm_link l;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || rm_transport_tcp.adopt_fd(sv[0], -1, NULL, 0, &conn) ||
	    rm_link_init(&l, conn))
		return 1;
	static unsigned char data[200000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 31 + 7);
	if (write(sv[1], data, sizeof(data)) != (ssize_t)sizeof(data))
		return 1;
	unsigned char got[sizeof(data)];
	EXPECT(rm_link_read(&l, NULL, 0) == 0);     /* an empty message: nothing read, buf unused */
	EXPECT(rm_link_read(&l, got, 10) == 0);     /* small: through the buffer */
	EXPECT(rm_link_read(&l, NULL, 0) == 0);
	EXPECT(rm_link_skip(&l, 90) == 0);
	EXPECT(rm_link_read(&l, got + 100, 150000) == 0); /* large: straight into got */
	EXPECT(rm_link_read(&l, got + 150100, sizeof(data) - 150100) == 0);
	EXPECT(memcmp(got, data, 10) == 0);
	EXPECT(memcmp(got + 100, data + 100, sizeof(data) - 100) == 0);
	close(sv[1]);
	EXPECT(rm_link_read(&l, got, 1) < 0); /* the peer has gone */
	rm_link_close(&l);
	if (!failures)
		printf("link: ok\n");
	return failures ? 1 : 0;
}
