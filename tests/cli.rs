//! End-to-end tests of the `icsim` command line: one test binary, one module
//! per command under tests/cli/ (named by path: a test crate's root looks
//! for its modules beside it, where cargo would build each as a binary).

#[path = "cli/calibrate_run.rs"]
mod calibrate_run;
