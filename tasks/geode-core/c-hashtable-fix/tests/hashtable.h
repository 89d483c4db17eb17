#ifndef HASHTABLE_H
#define HASHTABLE_H
#include <stddef.h>

/* A string -> string hash map (open addressing). Do not change this interface. */
typedef struct HashTable HashTable;

HashTable *ht_new(void);
void ht_free(HashTable *t);

/* Inserts key or replaces its value. The table keeps its own copies of key and value, so the
   caller may reuse or free its buffers afterwards. Returns 0 on success, -1 if out of memory. */
int ht_put(HashTable *t, const char *key, const char *value);

/* The value stored for key, or NULL. */
const char *ht_get(const HashTable *t, const char *key);

/* Removes key. Returns 1 if it was present, 0 otherwise. */
int ht_delete(HashTable *t, const char *key);

/* Number of keys stored. */
size_t ht_size(const HashTable *t);

/* Calls fn once for every stored key (in no particular order). */
void ht_foreach(const HashTable *t, void (*fn)(const char *key, const char *value, void *ctx), void *ctx);

#endif
