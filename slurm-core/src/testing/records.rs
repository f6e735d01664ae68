//! Records in the states a crash or a lost answer leaves behind, for tests that settle
//! them: [`RecordFixture`] writes the fields a user of [`JobRecord`] only reads.

use std::time::Duration;

use crate::record::{BackendRef, JobRecord};

/// A [`JobRecord`] changed the way a submitter that died, or a settle that could not
/// ask the scheduler, would have left it; open [`RecordFixture::into_record`] in a store.
#[derive(Debug, Clone)]
pub struct RecordFixture(JobRecord);

impl RecordFixture {
    /// Start from `record` (e.g. [`JobRecord::new`]: SUBMITTING, attempt 1).
    pub fn new(record: JobRecord) -> Self {
        RecordFixture(record)
    }

    /// Opened `age` ago (its submit is no longer in its first seconds).
    pub fn submitted_ago(mut self, age: Duration) -> Self {
        let age = chrono::Duration::from_std(age).expect("a test's age fits");
        self.0.submitted_at -= age;
        self
    }

    /// `attempts` tries to hand the job to the scheduler counted (each is counted before
    /// it is sent).
    pub fn submit_attempts(mut self, attempts: u32) -> Self {
        self.0.submit_attempts = Some(attempts);
        self
    }

    /// Not settled: the scheduler has not answered, for `reason`, with its jobs seen
    /// carrying the record's name.
    pub fn unsettled(mut self, reason: impl Into<String>, candidates: Vec<BackendRef>) -> Self {
        self.0.unsettled = Some(crate::record::Unsettled::unanswered(reason));
        self.0.candidates = candidates;
        self
    }

    /// The record.
    pub fn into_record(self) -> JobRecord {
        self.0
    }
}
