#include <stdio.h>
#include "ops.h"
#include "parse.h"
#include "stack.h"

/* rpn: evaluates a reverse Polish notation expression given as arguments.
   Example: rpn 3 4 + 2 '*'   prints 14 */
int main(int argc, char **argv) {
    Stack s;
    double v;
    stack_init(&s);
    for (int i = 1; i < argc; i++) {
        if (is_op(argv[i])) {
            if (apply_op(&s, argv[i]) != 0) {
                fprintf(stderr, "rpn: error at '%s'\n", argv[i]);
                return 1;
            }
        } else if (parse_number(argv[i], &v) == 0) {
            if (stack_push(&s, v) != 0) {
                fprintf(stderr, "rpn: stack overflow\n");
                return 1;
            }
        } else {
            fprintf(stderr, "rpn: bad token '%s'\n", argv[i]);
            return 1;
        }
    }
    if (s.top != 1) {
        fprintf(stderr, "rpn: expected exactly one result, have %d\n", s.top);
        return 1;
    }
    printf("%.10g\n", s.items[0]);
    return 0;
}
