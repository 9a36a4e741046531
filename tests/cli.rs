//! The `icsim` command line end to end: one test binary, one module per
//! family of subcommands (under tests/cli/, which cargo does not build as
//! test binaries of their own).

#[path = "cli/llm.rs"]
mod llm;
