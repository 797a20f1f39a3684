/* integrity.c - MD2, HMAC-MD2 and the cudart integrity-check answer built on them. */
#include "integrity.h"

#include <string.h>

/* RFC 1319: a permutation of 0..255 built from the digits of pi. */
static const uint8_t md2_pi_subst[256] = {
     41,  46,  67, 201, 162, 216, 124,   1,  61,  54,  84, 161, 236, 240,   6,  19,
     98, 167,   5, 243, 192, 199, 115, 140, 152, 147,  43, 217, 188,  76, 130, 202,
     30, 155,  87,  60, 253, 212, 224,  22, 103,  66, 111,  24, 138,  23, 229,  18,
    190,  78, 196, 214, 218, 158, 222,  73, 160, 251, 245, 142, 187,  47, 238, 122,
    169, 104, 121, 145,  21, 178,   7,  63, 148, 194,  16, 137,  11,  34,  95,  33,
    128, 127,  93, 154,  90, 144,  50,  39,  53,  62, 204, 231, 191, 247, 151,   3,
    255,  25,  48, 179,  72, 165, 181, 209, 215,  94, 146,  42, 172,  86, 170, 198,
     79, 184,  56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116,   4, 241,
     69, 157, 112,  89, 100, 113, 135,  32, 134,  91, 207, 101, 230,  45, 168,   2,
     27,  96,  37, 173, 174, 176, 185, 246,  28,  70,  97, 105,  52,  64, 126,  15,
     85,  71, 163,  35, 221,  81, 175,  58, 195,  92, 249, 206, 186, 197, 234,  38,
     44,  83,  13, 110, 133,  40, 132,   9, 211, 223, 205, 244,  65, 129,  77,  82,
    106, 220,  55, 200, 108, 193, 171, 250,  36, 225, 123,   8,  12, 189, 177,  74,
    120, 136, 149, 139, 227,  99, 232, 109, 233, 203, 213, 254,  59,   0,  29,  57,
    242, 239, 183,  14, 102,  88, 208, 228, 166, 119, 114, 248, 235, 117,  75,  10,
     49,  68,  80, 180, 143, 237,  31,  26, 219, 153, 141,  51, 159,  17, 131,  20,
};

void rm_md2_init(struct rm_md2 *md)
{
    memset(md, 0, sizeof *md);
}

/* Mixes the full block held in state[16..32] into the chaining value: 18 rounds over X. */
static void md2_compress(struct rm_md2 *md)
{
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = md->state[k] ^= md2_pi_subst[t];
        t = (uint8_t)(t + round);
    }
}

void rm_md2_update(struct rm_md2 *md, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = p[i], j = md->used;
        md->state[16 + j] = b;
        md->state[32 + j] = (uint8_t)(b ^ md->state[j]);
        md->last = md->checksum[j] ^= md2_pi_subst[b ^ md->last];
        md->used = (uint8_t)((j + 1) % RM_MD2_BLOCK);
        if (md->used == 0)
            md2_compress(md);
    }
}

void rm_md2_final(struct rm_md2 *md, uint8_t digest[RM_MD2_DIGEST])
{
    uint8_t pad[RM_MD2_BLOCK], sum[16];
    uint8_t n = (uint8_t)(RM_MD2_BLOCK - md->used);   /* 1..16, never 0 */
    memset(pad, n, n);
    rm_md2_update(md, pad, n);
    memcpy(sum, md->checksum, sizeof sum);
    rm_md2_update(md, sum, sizeof sum);
    memcpy(digest, md->state, RM_MD2_DIGEST);
    rm_md2_init(md);
}

static void hmac_md2_pad(struct rm_md2 *md, const uint8_t key[RM_MD2_BLOCK], uint8_t fill)
{
    uint8_t block[RM_MD2_BLOCK];
    for (int i = 0; i < RM_MD2_BLOCK; i++)
        block[i] = key[i] ^ fill;
    rm_md2_init(md);
    rm_md2_update(md, block, sizeof block);
}

void rm_hmac_md2_init(struct rm_hmac_md2 *h, const uint8_t *key, size_t key_len)
{
    memset(h->key, 0, sizeof h->key);
    memcpy(h->key, key, key_len < RM_MD2_BLOCK ? key_len : RM_MD2_BLOCK);
    hmac_md2_pad(&h->inner, h->key, 0x36);
}

void rm_hmac_md2_update(struct rm_hmac_md2 *h, const void *data, size_t len)
{
    rm_md2_update(&h->inner, data, len);
}

void rm_hmac_md2_final(struct rm_hmac_md2 *h, uint8_t mac[RM_MD2_DIGEST])
{
    struct rm_md2 outer;
    uint8_t inner[RM_MD2_DIGEST];
    rm_md2_final(&h->inner, inner);
    hmac_md2_pad(&outer, h->key, 0x5c);
    rm_md2_update(&outer, inner, sizeof inner);
    rm_md2_final(&outer, mac);
}

/* The driver's fixed HMAC key. */
static const uint8_t integrity_key[RM_MD2_BLOCK] = {
    0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
};

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

void rm_integrity_answer(const struct rm_integrity_input *in, uint8_t answer[16])
{
    struct rm_hmac_md2 h;
    uint8_t msg[48], *p = msg;

    p = put_le(p, in->driver_version, 4);
    p = put_le(p, in->check_version, 4);
    p = put_le(p, in->pid, 4);
    p = put_le(p, in->thread, 4);
    p = put_le(p, in->cudart_table, 8);
    p = put_le(p, in->integrity_table, 8);
    p = put_le(p, in->check_fn, 8);
    put_le(p, in->unix_seconds, 8);

    rm_hmac_md2_init(&h, integrity_key, sizeof integrity_key);
    rm_hmac_md2_update(&h, msg, sizeof msg);
    for (size_t i = 0; i < in->device_count; i++) {
        const struct rm_integrity_device *d = &in->devices[i];
        uint8_t dev[28];
        memcpy(dev, d->uuid, 16);
        put_le(put_le(put_le(dev + 16, (uint32_t)d->pci_domain, 4), (uint32_t)d->pci_bus, 4),
               (uint32_t)d->pci_device, 4);
        rm_hmac_md2_update(&h, dev, sizeof dev);
    }
    rm_hmac_md2_final(&h, answer);
}
