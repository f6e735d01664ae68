//! The spinner on stderr for long waits, only when stderr is a terminal (nothing on a pipe).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::output::write_stdout;

/// A spinner with the elapsed time on stderr, only when stderr is a terminal.
pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    /// Start a spinner saying `message`.
    pub(crate) fn start(message: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]")
                .expect("a valid template"),
        );
        bar.set_message(message.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress(Some(bar))
    }

    /// Say `message` now.
    pub(crate) fn set(&self, message: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(message.to_string());
        }
    }

    /// Print a line on stdout without tearing the spinner.
    pub(crate) fn line(&self, text: &str) {
        let print = || write_stdout(&format!("{text}\n"));
        match &self.0 {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Print a line on stderr without tearing the spinner (what is not a job's event).
    pub(crate) fn note(&self, text: &str) {
        let print = || eprintln!("{text}");
        match &self.0 {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Clear the spinner.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
