#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "hashtable.h"

typedef struct {
    char *key;   /* NULL: empty slot */
    char *value;
} Entry;

struct HashTable {
    Entry *slots;
    size_t cap;  /* always a power of two */
    size_t size;
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

HashTable *ht_new(void) {
    HashTable *t = malloc(sizeof *t);
    if (!t) return NULL;
    t->cap = 8;
    t->size = 0;
    t->slots = calloc(t->cap, sizeof(Entry));
    if (!t->slots) { free(t); return NULL; }
    return t;
}

void ht_free(HashTable *t) {
    if (!t) return;
    for (size_t i = 0; i < t->cap; i++) {
        free(t->slots[i].key);
        free(t->slots[i].value);
    }
    free(t->slots);
    free(t);
}

static Entry *find(const HashTable *t, const char *key) {
    size_t i = hash(key) & (t->cap - 1);
    while (t->slots[i].key) {
        if (strcmp(t->slots[i].key, key) == 0) return &t->slots[i];
        i = (i + 1) & (t->cap - 1);
    }
    return NULL;
}

static int grow(HashTable *t) {
    size_t old_cap = t->cap;
    Entry *old = t->slots;
    Entry *slots = calloc(old_cap * 2, sizeof(Entry));
    if (!slots) return -1;
    t->slots = slots;
    for (size_t j = 0; j < old_cap; j++) {
        if (!old[j].key) continue;
        size_t i = hash(old[j].key) & (t->cap - 1);
        while (slots[i].key) i = (i + 1) & (t->cap - 1);
        slots[i] = old[j];
    }
    t->cap = old_cap * 2;
    free(old);
    return 0;
}

int ht_put(HashTable *t, const char *key, const char *value) {
    Entry *e = find(t, key);
    if (e) {
        free(e->value);
        e->value = (char *)value;
        return 0;
    }
    if ((t->size + 1) * 10 > t->cap * 7 && grow(t) != 0) return -1;
    size_t i = hash(key) & (t->cap - 1);
    while (t->slots[i].key) i = (i + 1) & (t->cap - 1);
    t->slots[i].key = strdup(key);
    t->slots[i].value = strdup(value);
    if (!t->slots[i].key || !t->slots[i].value) return -1;
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
    e->key = NULL;
    e->value = NULL;
    return 1;
}

size_t ht_size(const HashTable *t) { return t->size; }

void ht_foreach(const HashTable *t, void (*fn)(const char *, const char *, void *), void *ctx) {
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key) fn(t->slots[i].key, t->slots[i].value, ctx);
}
