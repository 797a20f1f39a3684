/* remora-link: the link emulator's tool (scripts/link-emu.sh): the delay line (link_relay.c),
 * the probe that measures the link (link_probe.c) and entering a network namespace. */
#ifndef REMORA_BENCH_LINK_TOOL_H
#define REMORA_BENCH_LINK_TOOL_H

int link_relay_main(int argc, char **argv);
int link_probe_server_main(int argc, char **argv);
int link_probe_main(int argc, char **argv);

#endif
