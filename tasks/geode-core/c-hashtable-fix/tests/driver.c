/* Hidden driver for the hash table checks.
     put K V | get K | del K | size | dump (sorted key=value lines, then "end")
   Buffers are heap-allocated, scribbled over and freed after every command, so a table that keeps
   the caller's pointers instead of copies is caught. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hashtable.h"

typedef struct { char **items; size_t n, cap; } List;

static void collect(const char *k, const char *v, void *ctx) {
    List *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->items = realloc(l->items, l->cap * sizeof(char *));
    }
    size_t len = strlen(k) + strlen(v) + 2;
    l->items[l->n] = malloc(len);
    snprintf(l->items[l->n], len, "%s=%s", k, v);
    l->n++;
}

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    memcpy(p, s, n);
    return p;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    HashTable *t = ht_new();
    char line[8192];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char *cmd = strtok(line, " ");
        if (!cmd) continue;
        char *a = strtok(NULL, " "), *b = strtok(NULL, " ");
        char *key = a ? dupstr(a) : NULL, *val = b ? dupstr(b) : NULL;
        if (strcmp(cmd, "put") == 0) {
            if (ht_put(t, key, val) != 0) { puts("PUT FAILED"); }
        } else if (strcmp(cmd, "get") == 0) {
            const char *v = ht_get(t, key);
            puts(v ? v : "(nil)");
        } else if (strcmp(cmd, "del") == 0) {
            printf("%d\n", ht_delete(t, key));
        } else if (strcmp(cmd, "size") == 0) {
            printf("%zu\n", ht_size(t));
        } else if (strcmp(cmd, "dump") == 0) {
            List l = {0};
            ht_foreach(t, collect, &l);
            if (l.n) qsort(l.items, l.n, sizeof(char *), cmp);
            for (size_t i = 0; i < l.n; i++) { puts(l.items[i]); free(l.items[i]); }
            free(l.items);
            puts("end");
        }
        if (key) { memset(key, '#', strlen(key)); free(key); }
        if (val) { memset(val, '#', strlen(val)); free(val); }
    }
    ht_free(t);
    puts("freed");
    return 0;
}
