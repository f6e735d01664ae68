//! A resumable run on this machine ([`LocalResume`]): the signal before the wall, the
//! restart count and the checkpoint each segment's command sees, and the message a
//! continued segment leaves in the record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use crate::record::{Mark, SegmentEnd, SegmentNote, TransitionSource};
use crate::spec::{ResumeSpec, RESTART_COUNT_VAR, RESUME_FROM_VAR};
use crate::state::JobState;

/// What a resumable job's supervisor needs: when the signal comes, which one, the
/// budget, and where the checkpoints are.
#[derive(Debug, Clone)]
pub(super) struct LocalResume {
    /// The signal's number.
    pub(super) signal: i32,
    /// How long after a segment starts the signal comes (the wall less the warning).
    pub(super) warn_after: Duration,
    /// How many times the run may be continued.
    pub(super) max_restarts: u32,
    /// The restarts so far (what the command sees as `SLURM_RUN_RESTART_COUNT`).
    pub(super) restarts: u32,
    /// The checkpoint glob, relative to `dir`.
    checkpoints: Option<String>,
    /// The job folder.
    dir: PathBuf,
}

impl LocalResume {
    /// The resume of `spec` for a job in `dir` whose wall is `wall` (both already scaled).
    pub(super) fn new(
        spec: &ResumeSpec,
        dir: &Path,
        wall: Duration,
        warn_before: Duration,
    ) -> Self {
        LocalResume {
            signal: i32::from(spec.signal.number()),
            warn_after: wall.saturating_sub(warn_before),
            max_restarts: spec.max_restarts,
            restarts: 0,
            checkpoints: spec.checkpoints.clone(),
            dir: dir.to_path_buf(),
        }
    }

    /// The newest non-empty file matching the checkpoint glob, relative to the job folder.
    pub(super) fn newest_checkpoint(&self) -> Option<String> {
        let pattern = self.checkpoints.as_deref()?;
        let full = self.dir.join(pattern);
        let newest = glob::glob(&full.to_string_lossy())
            .ok()?
            .filter_map(std::result::Result::ok)
            .filter_map(|path| {
                let meta = std::fs::metadata(&path).ok()?;
                (meta.is_file() && meta.len() > 0).then(|| (meta.modified().ok(), path))
            })
            .max_by_key(|(modified, _)| *modified)?
            .1;
        newest
            .strip_prefix(&self.dir)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    /// Set the segment's environment on `command`: the restart count and the checkpoint
    /// to resume from (empty when none).
    pub(super) fn prepare(&self, command: &mut Command) {
        let resume_from = self
            .newest_checkpoint()
            .map(|c| self.dir.join(c).to_string_lossy().into_owned())
            .unwrap_or_default();
        command
            .env(RESTART_COUNT_VAR, self.restarts.to_string())
            .env(RESUME_FROM_VAR, resume_from);
    }

    /// The mark of a segment that ended by the wall and is continued (the restart count
    /// already raised): PENDING, saying which segment comes and what it resumes from.
    pub(super) fn continued_mark(&self) -> Mark {
        let checkpoint = self.newest_checkpoint();
        let mut message = format!("continued after the wall: segment {}", self.restarts + 1);
        if let Some(checkpoint) = &checkpoint {
            message.push_str(&format!(", resumes from {checkpoint}"));
        }
        Mark::new(JobState::Pending, TransitionSource::Poll)
            .message(message)
            .segment(SegmentNote {
                end: Some(SegmentEnd::Wall),
                checkpoint,
            })
    }

    /// What a record says of a run whose segment ended by the wall with no restart left.
    pub(super) fn budget_message(&self) -> String {
        format!(
            "the resume budget is used up: the run was continued {n} time(s) (resume.max_restarts: {n}) and its segment {} ended by the wall again; raise resume.max_restarts or time, or make the command finish sooner",
            self.restarts + 1,
            n = self.max_restarts
        )
    }
}
