/* Command driver: reads lines from stdin and prints results.
     put KEY VALUE   -> prints nothing
     get KEY         -> prints the value or (nil)
     del KEY         -> prints 1 or 0
     size            -> prints the number of keys
*/
#include <stdio.h>
#include <string.h>
#include "hashtable.h"

int main(void) {
    HashTable *t = ht_new();
    char line[4096], cmd[16], key[2048], value[2048];
    while (fgets(line, sizeof line, stdin)) {
        int n = sscanf(line, "%15s %2047s %2047s", cmd, key, value);
        if (n >= 3 && strcmp(cmd, "put") == 0) {
            ht_put(t, key, value);
        } else if (n >= 2 && strcmp(cmd, "get") == 0) {
            const char *v = ht_get(t, key);
            puts(v ? v : "(nil)");
        } else if (n >= 2 && strcmp(cmd, "del") == 0) {
            printf("%d\n", ht_delete(t, key));
        } else if (n >= 1 && strcmp(cmd, "size") == 0) {
            printf("%zu\n", ht_size(t));
        }
    }
    ht_free(t);
    return 0;
}
