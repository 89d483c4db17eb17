mod builtin_tools;
