#ifndef PARSE_H
#define PARSE_H

/* Parses a decimal number token. Returns 0 and stores the value on success, -1 otherwise. */
int parse_number(const char *tok, double *out);

#endif
