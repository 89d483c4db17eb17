//! Built-in tools (bash, files, search).
