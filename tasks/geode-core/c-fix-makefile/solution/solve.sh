#!/usr/bin/env bash
set -euo pipefail
cd /app/calc
# the unused variable breaks -Werror
sed -i '/^    int unused;$/d' src/parse.c
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -std=c99 -O2 -Wall -Wextra -Werror
LDLIBS = -lm

SRCS = $(wildcard src/*.c)
OBJS = $(SRCS:.c=.o)

rpn: $(OBJS)
	$(CC) $(CFLAGS) -o rpn $(OBJS) $(LDLIBS)

src/%.o: src/%.c
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

-include $(OBJS:.o=.d)

clean:
	rm -f $(OBJS) $(OBJS:.o=.d) rpn

.PHONY: clean
MK
make -s
