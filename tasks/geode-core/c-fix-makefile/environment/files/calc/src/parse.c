#include <errno.h>
#include <stdlib.h>
#include "parse.h"

int parse_number(const char *tok, double *out) {
    char *end;
    int unused;
    errno = 0;
    *out = strtod(tok, &end);
    if (end == tok || *end != '\0' || errno != 0) return -1;
    return 0;
}
