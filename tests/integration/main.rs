//! icsim's integration tests, in one test binary: the command line end to
//! end, fidelity against the shared measurements and public figures, and
//! properties that must hold for any input.

mod bad_input;
mod calibrate_run;
mod cli;
mod common;
mod fidelity;
mod forward;
mod hostile;
mod import;
mod layout;
mod llm;
mod nccl_rules;
mod physics;
mod properties;
mod readme;
mod reference;
mod scale;
mod serve;
mod serve_fidelity;
mod storage;
mod sweep;
