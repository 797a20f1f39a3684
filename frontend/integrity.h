/* integrity.h - the answer cudart expects from its integrity-check export table (d4082055).
 *
 * cudart hands the driver a check version and the time, recomputes the answer itself and
 * compares: HMAC-MD2, under a fixed key, of the process, the tables handed out and every device.
 * cudart 13.0 asks for versions 13000, 13001 and 13002 but only rejects a wrong answer to 13002
 * (measured); all three get the same computation. Pure functions of their inputs. */
#ifndef RM_FRONTEND_INTEGRITY_H
#define RM_FRONTEND_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

#define RM_MD2_BLOCK 16
#define RM_MD2_DIGEST 16

/* MD2 (RFC 1319), streaming. */
struct rm_md2 {
    uint8_t state[48];    /* X: chaining value, current block, their xor */
    uint8_t checksum[16];
    uint8_t used;         /* bytes of the current block filled so far */
    uint8_t last;         /* L: last checksum byte written */
};
void rm_md2_init(struct rm_md2 *md);
void rm_md2_update(struct rm_md2 *md, const void *data, size_t len);
void rm_md2_final(struct rm_md2 *md, uint8_t digest[RM_MD2_DIGEST]);

/* HMAC (RFC 2104) over MD2 with a key of at most one block. */
struct rm_hmac_md2 {
    struct rm_md2 inner;
    uint8_t key[RM_MD2_BLOCK];
};
void rm_hmac_md2_init(struct rm_hmac_md2 *h, const uint8_t *key, size_t key_len);
void rm_hmac_md2_update(struct rm_hmac_md2 *h, const void *data, size_t len);
void rm_hmac_md2_final(struct rm_hmac_md2 *h, uint8_t mac[RM_MD2_DIGEST]);

/* One device as the check sees it. */
struct rm_integrity_device {
    uint8_t uuid[16];     /* cuDeviceGetUuid */
    int32_t pci_domain;   /* CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID */
    int32_t pci_bus;      /* CU_DEVICE_ATTRIBUTE_PCI_BUS_ID */
    int32_t pci_device;   /* CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID */
};

struct rm_integrity_input {
    uint32_t check_version;     /* slot argument: 13000, 13001, 13002 for cudart 13 */
    uint64_t unix_seconds;      /* slot argument: cudart's time() */
    uint32_t driver_version;    /* cuDriverGetVersion */
    uint32_t pid;               /* getpid() */
    uint32_t thread;            /* low 32 bits of pthread_self() */
    uint64_t cudart_table;      /* address handed out for 6bd5fb6c */
    uint64_t integrity_table;   /* address handed out for d4082055 */
    uint64_t check_fn;          /* integrity table slot 1 */
    const struct rm_integrity_device *devices;
    size_t device_count;
};

/* Fills the 16 bytes cudart expects in the slot's output buffer. */
void rm_integrity_answer(const struct rm_integrity_input *in, uint8_t answer[16]);

#endif
