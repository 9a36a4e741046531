//! The `icsim` command line: parses what the user typed, calls the library,
//! prints. No model logic lives here.

#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let outcome = cli::run(args);
    // The error line first: what was noticed on the way follows it.
    if let Err(error) = &outcome {
        eprintln!("error: {}", cli::error_line(error));
    }
    cli::print_notices();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => ExitCode::from(cli::exit_code(&error)),
    }
}
