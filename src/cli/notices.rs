//! Warnings and notes of one command, held until it ends: a command that
//! fails prints its one error line first, then what it noticed on the way;
//! one that succeeds prints them after its results. Decides nothing.

use std::sync::Mutex;

/// Lines said so far, in order.
static HELD: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Holds `warning: {text}`.
pub fn warn(text: impl std::fmt::Display) {
    hold(format!("warning: {text}"));
}

/// Holds `note: {text}`.
pub fn note(text: impl std::fmt::Display) {
    hold(format!("note: {text}"));
}

fn hold(line: String) {
    // A poisoned lock still holds the lines said before the panic.
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(line);
}

/// Prints every line held, on standard error, and forgets them.
pub fn print() {
    let held = std::mem::take(&mut *HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    for line in held {
        eprintln!("{line}");
    }
}
