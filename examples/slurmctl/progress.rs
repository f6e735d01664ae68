//! The spinner on stderr for long waits, only when stderr is a terminal (nothing on a pipe).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use slurm_run::CodeSent;

use crate::output::write_stdout;

/// A code tree to send of at least this many bytes gets a bar instead of the spinner.
const CODE_BAR_FROM: u64 = 1024 * 1024;

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

    /// A handle that shows a code tree's upload as a bar of bytes (from any thread):
    /// trees under a MiB keep the spinner.
    pub(crate) fn code_upload(&self) -> impl Fn(CodeSent) + Send + Sync + 'static {
        let bar = self.0.clone();
        move |sent: CodeSent| {
            let Some(bar) = &bar else { return };
            if sent.missing_bytes < CODE_BAR_FROM {
                return;
            }
            if bar.length() != Some(sent.missing_bytes) {
                bar.set_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
                    )
                    .expect("a valid template")
                    .progress_chars("=> "),
                );
                bar.set_length(sent.missing_bytes);
                bar.set_message(format!("sending code ({} files)", sent.missing_objects));
            }
            bar.set_position(sent.sent_bytes);
            if sent.sent_bytes == sent.missing_bytes {
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]")
                        .expect("a valid template"),
                );
                bar.set_message("submitting");
            }
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
