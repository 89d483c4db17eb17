#!/usr/bin/env bash
set -euo pipefail
cat > /app/rle/rle.c <<'C'
/* rle: byte-oriented run-length encoder/decoder.
 *
 *   rle -c  < input > output    compress
 *   rle -d  < input > output    decompress
 *
 * Format: the compressed stream is a sequence of (count, byte) pairs, each one two bytes:
 * `count` (1..255) repetitions of `byte`. Runs longer than 255 are split into several pairs.
 */
#include <stdio.h>
#include <string.h>

static int compress(FILE *in, FILE *out) {
    int c, prev = 0;
    int count = 0;
    while ((c = getc(in)) != EOF) {
        if (count > 0 && c == prev && count < 255) {
            count++;
            continue;
        }
        if (count > 0) {
            putc(count, out);
            putc(prev, out);
        }
        prev = c;
        count = 1;
    }
    if (count > 0) {
        putc(count, out);
        putc(prev, out);
    }
    return 0;
}

static int decompress(FILE *in, FILE *out) {
    int count, byte;
    while ((count = getc(in)) != EOF) {
        byte = getc(in);
        if (byte == EOF) {
            fprintf(stderr, "rle: truncated input\n");
            return 1;
        }
        if (count == 0) {
            fprintf(stderr, "rle: invalid run length 0\n");
            return 1;
        }
        for (int i = 0; i < count; i++)
            putc(byte, out);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: rle -c|-d\n");
        return 2;
    }
    if (strcmp(argv[1], "-c") == 0)
        return compress(stdin, stdout);
    if (strcmp(argv[1], "-d") == 0)
        return decompress(stdin, stdout);
    fprintf(stderr, "usage: rle -c|-d\n");
    return 2;
}
C
