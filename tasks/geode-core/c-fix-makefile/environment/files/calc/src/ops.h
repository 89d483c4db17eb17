#ifndef OPS_H
#define OPS_H
#include "stack.h"

/* Applies the operator token to the stack. Returns 0 on success, -1 on error
   (unknown operator, stack underflow, division by zero). */
int apply_op(Stack *s, const char *tok);
int is_op(const char *tok);

#endif
