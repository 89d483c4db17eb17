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
    char c, prev;
    unsigned char count = 0;
    while ((c = getc(in)) != EOF) {
        if (count > 0 && c == prev) {
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
    putc(count, out);
    putc(prev, out);
    return 0;
}

static int decompress(FILE *in, FILE *out) {
    int count, byte;
    while ((count = getc(in)) != EOF) {
        byte = getc(in);
        for (int i = 0; i <= count; i++)
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
