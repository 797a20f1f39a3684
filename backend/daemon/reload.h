/* The accepting process's configuration in force, and SIGHUP's reload of it
 * (docs/configuration.md, Signals). */
#ifndef REMORA_RELOAD_H
#define REMORA_RELOAD_H

#include "config.h"

/* Puts cfg in force, publishes its quotas to the registry, and from now on reloads on
 * SIGHUP by calling reread (0, or -1 after a line saying why); without reread, or without
 * a thread for it, SIGHUP is ignored (a line says so). */
void rm_reload_start(const struct rm_daemon_config *cfg, int (*reread)(struct rm_daemon_config *out));
/* Reads the configuration again as a reload would, into out: 0 (also where there is no
 * reread function), or -1. */
int rm_reload_reread(struct rm_daemon_config *out);

#endif
