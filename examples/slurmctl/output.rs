//! Where results go: stdout in the format asked for (JSON Lines or text), errors on stderr.

use std::io::{IsTerminal, Write};

use slurm_run::prelude::{Error, JobRecord, JobStatus};
use slurm_run::{Forecast, NativeStatus, PreflightCheck, WaitAnswer};

use crate::json;
use crate::text::{self, Style};
use crate::waiting;

/// Write `text` to stdout as it is; a closed pipe ends the program quietly.
pub(crate) fn write_stdout(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}

/// Where and how results are printed.
pub(crate) struct Out {
    /// JSON Lines (`--json`) rather than text.
    pub(crate) json: bool,
    /// The text's colours (off with `--json`, on a pipe, or with `NO_COLOR`).
    pub(crate) style: Style,
}

impl Out {
    /// Results as JSON Lines when `json`, else as text (in colour on a terminal).
    pub(crate) fn new(json: bool) -> Self {
        let color =
            !json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Out {
            json,
            style: Style { color },
        }
    }

    /// Write `text` to stdout as it is.
    pub(crate) fn raw(&self, text: &str) {
        write_stdout(text);
    }

    /// Write one line to stdout.
    pub(crate) fn line(&self, text: &str) {
        self.raw(&format!("{text}\n"));
    }

    fn lines(&self, lines: Vec<String>) {
        for line in lines {
            self.line(&line);
        }
    }

    /// Statuses: as [`Out::jobs`], and for an array one JSON object per task (one
    /// line per group of tasks in the same state without `--json`).
    pub(crate) fn statuses(&self, statuses: &[JobStatus]) {
        if self.json {
            for status in statuses {
                if status.record().is_array() {
                    for index in status.record().tasks().keys() {
                        let task = json::task(status.record(), *index, status.tasks().get(index));
                        self.line(&task.to_string());
                    }
                } else if status.record().is_multi_role() {
                    for name in status.record().roles().keys() {
                        let role = json::role(status.record(), name, status.native());
                        self.line(&role.to_string());
                    }
                } else {
                    self.line(&json::job(status.record(), status.native()).to_string());
                }
            }
            return;
        }
        self.jobs(statuses.iter().map(|s| (s.record(), s.native())));
        for status in statuses.iter().filter(|s| s.record().is_array()) {
            self.lines(text::task_groups(self.style, status));
        }
        for status in statuses.iter().filter(|s| s.record().is_multi_role()) {
            self.lines(text::roles(self.style, status.record()));
        }
        for status in statuses
            .iter()
            .filter(|s| !s.record().segments().is_empty())
        {
            self.lines(text::segments(self.style, status.record()));
        }
    }

    /// Why jobs wait: one JSON object each, or a few lines each.
    pub(crate) fn wait_answers(&self, answers: &[WaitAnswer]) {
        for answer in answers {
            if self.json {
                self.line(&serde_json::to_string(answer).expect("an answer serialises"));
            } else {
                self.lines(waiting::wait_answer(self.style, answer));
            }
        }
    }

    /// A forecast: one JSON object per partition (`soonest` marks the first to start),
    /// or one line each.
    pub(crate) fn forecast(&self, forecast: &Forecast) {
        if !self.json {
            self.lines(waiting::forecast(self.style, forecast));
            return;
        }
        let soonest = forecast.soonest().map(|p| p.partition.clone());
        for partition in &forecast.partitions {
            let mut object = serde_json::to_value(partition).expect("a forecast serialises");
            object["soonest"] =
                serde_json::Value::Bool(soonest.as_deref() == Some(partition.partition.as_str()));
            self.line(&object.to_string());
        }
    }

    /// Jobs: JSON Lines, or an aligned table.
    pub(crate) fn jobs<'a>(
        &self,
        jobs: impl Iterator<Item = (&'a JobRecord, Option<&'a NativeStatus>)>,
    ) {
        let jobs: Vec<_> = jobs.collect();
        if self.json {
            for (record, native) in jobs {
                self.line(&json::job(record, native).to_string());
            }
            return;
        }
        self.lines(text::jobs_table(self.style, &jobs));
    }

    /// Preflight checks: one JSON object each, or an aligned list with remedies.
    pub(crate) fn preflight(&self, checks: &[PreflightCheck]) {
        if self.json {
            for c in checks {
                self.line(&json::check(c).to_string());
            }
            return;
        }
        self.lines(text::checks(self.style, checks));
    }

    /// What `records migrate` did: one JSON object, or a summary line and one line per
    /// record left in the folder.
    pub(crate) fn migration(
        &self,
        from: &std::path::Path,
        to: &slurm_run::RecordsLocation,
        migration: &slurm_run::Migration,
    ) {
        if self.json {
            self.line(&json::migration(from, to, migration).to_string());
            return;
        }
        self.line(&format!("{} -> {to}: {migration}", from.display()));
    }

    /// An error on stderr: text, or one JSON object with `--json`.
    pub(crate) fn error(&self, error: &Error, code: u8) {
        let message = if self.json {
            json::error(error, code).to_string()
        } else {
            let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let lead = Style { color }.paint("31", "error");
            format!("slurmctl: {lead}: {error}")
        };
        let _ = writeln!(std::io::stderr(), "{message}");
    }
}
