/* sd_notify.h - tells systemd how remorad is doing (Type=notify), when it started it. */
#ifndef REMORA_SD_NOTIFY_H
#define REMORA_SD_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", ...) to the socket NOTIFY_SOCKET names, if any:
 * systemd's protocol, a datagram on a Unix socket ("@" for the abstract namespace).
 * Nothing happens without NOTIFY_SOCKET; a failure is logged once and not fatal. */
void rm_sd_notify(const char *state);

#endif
