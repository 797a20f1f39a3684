/* The client library's settings: environment variables (docs/configuration.md), all
 * checked before the first server is dialed, so that a typo is refused with the
 * variable's name instead of being ignored or found halfway through a program. */
#ifndef REMORA_FRONTEND_ENVIRONMENT_H
#define REMORA_FRONTEND_ENVIRONMENT_H

/* Checks every variable the library reads: 0, or -EINVAL after one line on stderr for
 * each bad one, naming it and what is wrong. */
int rm_client_environment_check(void);

#endif
