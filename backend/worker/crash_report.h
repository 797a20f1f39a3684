/* A worker's crash reported with its signal, the call its thread served and its stack in
 * remorad's log. */
#ifndef REMORA_CRASH_REPORT_H
#define REMORA_CRASH_REPORT_H

#include <stdint.h>

/* Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (a worker's start). */
void rm_crash_report_install(void);

/* The call the calling thread serves (serve.c), named in a crash report: a crash inside
 * the driver leaves no stack to unwind, but its call tells which handler passed what. */
void rm_crash_note_call(uint32_t op, uint64_t session);

#endif
