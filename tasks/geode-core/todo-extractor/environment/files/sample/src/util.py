def f(x):
    # TODO: no owner, ignored
    # TODO(carol.d): make this faster
    return x * 2
