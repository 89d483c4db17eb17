mod agent_loop;
mod builtin_tools;
mod common;
mod pipeline;
