#!/usr/bin/env bash
set -euo pipefail
cat > /app/ht/hashtable.c <<'C'
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "hashtable.h"

typedef struct {
    char *key;   /* NULL: empty slot; TOMBSTONE: deleted slot */
    char *value;
} Entry;

static char tombstone_marker;
#define TOMBSTONE (&tombstone_marker)

struct HashTable {
    Entry *slots;
    size_t cap;   /* always a power of two */
    size_t size;  /* live keys */
    size_t used;  /* live keys + tombstones */
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

HashTable *ht_new(void) {
    HashTable *t = malloc(sizeof *t);
    if (!t) return NULL;
    t->cap = 8;
    t->size = t->used = 0;
    t->slots = calloc(t->cap, sizeof(Entry));
    if (!t->slots) { free(t); return NULL; }
    return t;
}

void ht_free(HashTable *t) {
    if (!t) return;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].key && t->slots[i].key != TOMBSTONE) {
            free(t->slots[i].key);
            free(t->slots[i].value);
        }
    }
    free(t->slots);
    free(t);
}

static Entry *find(const HashTable *t, const char *key) {
    size_t i = hash(key) & (t->cap - 1);
    while (t->slots[i].key) {
        if (t->slots[i].key != TOMBSTONE && strcmp(t->slots[i].key, key) == 0) return &t->slots[i];
        i = (i + 1) & (t->cap - 1);
    }
    return NULL;
}

/* Rebuilds the table with new_cap slots, dropping tombstones. */
static int rehash(HashTable *t, size_t new_cap) {
    Entry *slots = calloc(new_cap, sizeof(Entry));
    if (!slots) return -1;
    for (size_t j = 0; j < t->cap; j++) {
        Entry *e = &t->slots[j];
        if (!e->key || e->key == TOMBSTONE) continue;
        size_t i = hash(e->key) & (new_cap - 1);
        while (slots[i].key) i = (i + 1) & (new_cap - 1);
        slots[i] = *e;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = new_cap;
    t->used = t->size;
    return 0;
}

int ht_put(HashTable *t, const char *key, const char *value) {
    Entry *e = find(t, key);
    if (e) {
        char *v = dup(value);
        if (!v) return -1;
        free(e->value);
        e->value = v;
        return 0;
    }
    if ((t->used + 1) * 10 > t->cap * 7) {
        size_t new_cap = t->cap;
        while ((t->size + 1) * 10 > new_cap * 5) new_cap *= 2;
        if (rehash(t, new_cap) != 0) return -1;
    }
    char *k = dup(key), *v = dup(value);
    if (!k || !v) { free(k); free(v); return -1; }
    size_t i = hash(key) & (t->cap - 1);
    while (t->slots[i].key && t->slots[i].key != TOMBSTONE) i = (i + 1) & (t->cap - 1);
    if (!t->slots[i].key) t->used++;
    t->slots[i].key = k;
    t->slots[i].value = v;
    t->size++;
    return 0;
}

const char *ht_get(const HashTable *t, const char *key) {
    Entry *e = find(t, key);
    return e ? e->value : NULL;
}

int ht_delete(HashTable *t, const char *key) {
    Entry *e = find(t, key);
    if (!e) return 0;
    free(e->key);
    free(e->value);
    e->key = TOMBSTONE;
    e->value = NULL;
    t->size--;
    return 1;
}

size_t ht_size(const HashTable *t) { return t->size; }

void ht_foreach(const HashTable *t, void (*fn)(const char *, const char *, void *), void *ctx) {
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key && t->slots[i].key != TOMBSTONE) fn(t->slots[i].key, t->slots[i].value, ctx);
}
C
