//! The runner's progress bar on standard error (drawn only on a terminal),
//! with notices and warnings printed above it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The progress bar on standard error (drawn only on a terminal), with
/// notices printed above it.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn new(total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar }
    }

    /// Shows what is being measured.
    pub fn start(&self, label: &str) {
        self.bar.set_message(label.to_string());
    }

    /// Counts `points` as done (measured, or given up).
    pub fn advance(&self, points: u64) {
        self.bar.inc(points);
    }

    /// Removes the bar once everything is done.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    pub fn notice(&self, text: &str) {
        self.bar.suspend(|| eprintln!("notice: {text}"));
    }

    pub fn warning(&self, text: &str) {
        self.bar.suspend(|| eprintln!("warning: {text}"));
    }

    /// Passes on a line a child printed that is not the protocol's.
    pub fn forward(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }
}
