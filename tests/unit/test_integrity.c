/* test_integrity.c - MD2 against RFC 1319, HMAC-MD2 against its definition, and one integrity
 * answer that cudart accepted. Plain C; exits non-zero on failure. */
#include "frontend/integrity.h"

#include <stdio.h>
#include <string.h>

static int failures;

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void expect(const char *what, const uint8_t got[16], const char *want)
{
    char s[33];
    hex(got, 16, s);
    if (strcmp(s, want) != 0) {
        fprintf(stderr, "FAIL %s: got %s want %s\n", what, s, want);
        failures++;
    }
}

/* RFC 1319, appendix A.5. */
static void test_md2_rfc1319(void)
{
    static const struct { const char *msg, *digest; } v[] = {
        { "", "8350e5a3e24c153df2275c9f80692773" },
        { "a", "32ec01ec4a6dac72c0ab96fb34c0b5d1" },
        { "abc", "da853b0d3f88d99b30283a69e6ded6bb" },
        { "message digest", "ab4f496bfb2a530b219ff33031fe06b0" },
        { "abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b" },
        { "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
          "da33def2a42df13975352846c30338cd" },
        { "1234567890123456789012345678901234567890"
          "1234567890123456789012345678901234567890", "d5976f79d83d3a0dc9806c3c66f3efd8" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct rm_md2 md;
        uint8_t d[16];
        rm_md2_init(&md);
        rm_md2_update(&md, v[i].msg, strlen(v[i].msg));
        rm_md2_final(&md, d);
        expect(v[i].msg, d, v[i].digest);

        /* Same digest when fed one byte at a time. */
        rm_md2_init(&md);
        for (size_t k = 0; k < strlen(v[i].msg); k++)
            rm_md2_update(&md, v[i].msg + k, 1);
        rm_md2_final(&md, d);
        expect("bytewise", d, v[i].digest);
    }
}

/* HMAC-MD2 equals MD2(key^opad || MD2(key^ipad || msg)), built here from the MD2 primitive. */
static void test_hmac_md2_definition(void)
{
    static const uint8_t key[16] = "0123456789abcdef";
    static const char msg[] = "Remora integrity";
    uint8_t block[32], inner[16], want[16], got[16];
    struct rm_md2 md;
    struct rm_hmac_md2 h;
    char s[33];

    for (int i = 0; i < 16; i++)
        block[i] = key[i] ^ 0x36;
    memcpy(block + 16, msg, 16);
    rm_md2_init(&md);
    rm_md2_update(&md, block, 32);
    rm_md2_final(&md, inner);
    for (int i = 0; i < 16; i++)
        block[i] = key[i] ^ 0x5c;
    memcpy(block + 16, inner, 16);
    rm_md2_init(&md);
    rm_md2_update(&md, block, 32);
    rm_md2_final(&md, want);

    rm_hmac_md2_init(&h, key, sizeof key);
    rm_hmac_md2_update(&h, msg, 16);
    rm_hmac_md2_final(&h, got);
    hex(want, 16, s);
    expect("hmac-md2", got, s);
}

/* Inputs and answer of a check that static cudart 13.0 accepted (version 13002, the one it
 * verifies), recorded in the fake-libcuda harness. */
static void test_integrity_recorded(void)
{
    static const struct rm_integrity_device dev = {
        .uuid = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 },
        .pci_domain = 0, .pci_bus = 0x1b, .pci_device = 0,
    };
    const struct rm_integrity_input in = {
        .check_version = 13002, .unix_seconds = 1795252497, .driver_version = 13000,
        .pid = 7512, .thread = 0xcfaf3000, .cudart_table = 0x7ff4cfaeb380,
        .integrity_table = 0x7ff4cfaeb260, .check_fn = 0x7ff4cfad6ac9,
        .devices = &dev, .device_count = 1,
    };
    uint8_t got[16];
    rm_integrity_answer(&in, got);
    expect("recorded integrity answer", got, "dbcadff5f80a3c68e12b100a57961eb8");
}

int main(void)
{
    test_md2_rfc1319();
    test_hmac_md2_definition();
    test_integrity_recorded();
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        fprintf(stderr, "test_integrity: all passed\n");
    return failures != 0;
}
