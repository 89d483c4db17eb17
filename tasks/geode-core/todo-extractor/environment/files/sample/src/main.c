#include <stdio.h>
/* TODO(alice): handle argc == 0 */
int main(int argc, char **argv) {
    // todo(bob): lower-case does not count
    printf("hi\n"); // TODO(bob): use puts
    return 0;
}
