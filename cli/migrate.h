/* remora migrate and remora pool drain --migrate (docs/pool.md, "Live migration"). */
#ifndef REMORA_CLI_MIGRATE_H
#define REMORA_CLI_MIGRATE_H

#include "remora.pb-c.h"

/* Asks the daemon at addr for its status (pool.c): 0, or -errno with why said. */
int fetch_status(const char *addr, Remora__StatusReply **rep, char *why, size_t whylen);
/* Moves every client of the daemon at from to the daemon at to: 0 when all moved, else 1
 * after a line for each that did not. */
int rm_cli_migrate_all(const char *from, const char *to);
int cmd_migrate(int argc, char **argv);

#endif
