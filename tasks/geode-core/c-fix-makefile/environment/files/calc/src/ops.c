#include <math.h>
#include <string.h>
#include "ops.h"

int is_op(const char *tok) {
    return strcmp(tok, "+") == 0 || strcmp(tok, "-") == 0 || strcmp(tok, "*") == 0 ||
           strcmp(tok, "/") == 0 || strcmp(tok, "^") == 0 || strcmp(tok, "sqrt") == 0;
}

int apply_op(Stack *s, const char *tok) {
    double a, b;
    if (strcmp(tok, "sqrt") == 0) {
        if (stack_pop(s, &a) != 0 || a < 0) return -1;
        return stack_push(s, sqrt(a));
    }
    if (stack_pop(s, &b) != 0 || stack_pop(s, &a) != 0) return -1;
    switch (tok[0]) {
    case '+': return stack_push(s, a + b);
    case '-': return stack_push(s, a - b);
    case '*': return stack_push(s, a * b);
    case '/':
        if (b == 0) return -1;
        return stack_push(s, a / b);
    case '^': return stack_push(s, pow(a, b));
    }
    return -1;
}
