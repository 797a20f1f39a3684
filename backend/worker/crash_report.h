/* A worker's crash reported with its signal and stack in remorad's log. */
#ifndef REMORA_CRASH_REPORT_H
#define REMORA_CRASH_REPORT_H

/* Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (a worker's start). */
void rm_crash_report_install(void);

#endif
