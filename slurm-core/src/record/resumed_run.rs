//! A resumable run kept in its record: its resume budget, and its segments opened and
//! closed as marks arrive ([`JobRecord::note_segment`]).

use chrono::{DateTime, Utc};

use crate::state::JobState;

use super::{JobRecord, Segment, SegmentEnd, SegmentNote};

impl JobRecord {
    /// Whether the record is of a resumable run (its spec has a resume block).
    pub fn is_resumable(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| s.resume.is_some())
    }

    /// The resume budget (`resume.max_restarts`), for a resumable run.
    pub fn max_restarts(&self) -> Option<u32> {
        self.spec
            .as_ref()
            .and_then(|s| s.resume.as_ref())
            .map(|r| r.max_restarts)
    }

    /// Keep the segments true to a state change from `previous` to the record's state
    /// (just applied at `now`): a start opens one, a requeue closes it and counts a
    /// restart, an end closes it. Only a resumable run keeps segments.
    pub(crate) fn note_segment(
        &mut self,
        previous: JobState,
        note: Option<SegmentNote>,
        now: DateTime<Utc>,
    ) {
        if !self.is_resumable() {
            return;
        }
        let note = note.unwrap_or_default();
        let state = self.state;
        let open = self
            .segments
            .last()
            .is_some_and(|segment| segment.ended.is_none());
        let close = |record: &mut JobRecord, end: SegmentEnd| {
            if let Some(segment) = record.segments.last_mut().filter(|s| s.ended.is_none()) {
                segment.ended = Some(end);
                segment.ended_at = Some(now);
                if note.checkpoint.is_some() {
                    segment.checkpoint = note.checkpoint.clone();
                }
            }
        };
        match state {
            // Running again with a segment open (after UNKNOWN: a lost answer) is the
            // same segment.
            JobState::Running if previous != JobState::Running && !open => {
                self.segments.push(Segment {
                    job: self
                        .backend_ref
                        .as_ref()
                        .map(|r| r.native_id.clone())
                        .unwrap_or_default(),
                    nodes: self.nodes.clone(),
                    started_at: now,
                    ended_at: None,
                    ended: None,
                    checkpoint: None,
                    timeline: Default::default(),
                    usage: None,
                });
            }
            JobState::Pending if previous == JobState::Running && open => {
                close(self, note.end.unwrap_or(SegmentEnd::Requeued));
                self.restarts = self.restarts.saturating_add(1);
            }
            JobState::Complete => close(self, SegmentEnd::Done),
            JobState::Canceled => close(self, SegmentEnd::Canceled),
            JobState::Error => close(self, note.end.unwrap_or(SegmentEnd::Failed)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BackendRef, JobId, Mark, TransitionSource};
    use crate::spec::{JobSpec, ResumeSpec};
    use crate::storage::RemotePath;

    fn resumable() -> JobRecord {
        let mut spec = JobSpec::new("long", "python train.py");
        spec.resume = Some(ResumeSpec::new(3));
        let mut record = JobRecord::new(
            JobId::mint_for(&spec),
            &spec,
            RemotePath::parse_for("results_dir", "/r/long").unwrap(),
        )
        .unwrap();
        record.backend_ref = Some(BackendRef::new("42".to_string()));
        record
    }

    fn mark(record: &mut JobRecord, state: JobState, note: Option<SegmentNote>) {
        let mut mark = Mark::new(state, TransitionSource::Poll).nodes(vec!["n1".into()]);
        mark.segment = note;
        record.apply_mark(mark, None).unwrap();
    }

    #[test]
    fn three_segments_each_with_its_end_and_the_restarts_counted() {
        let mut record = resumable();
        mark(&mut record, JobState::Pending, None);
        mark(&mut record, JobState::Running, None);
        let wall = SegmentNote {
            end: Some(SegmentEnd::Wall),
            checkpoint: Some("ckpt/step-10.pt".into()),
        };
        mark(&mut record, JobState::Pending, Some(wall));
        mark(&mut record, JobState::Running, None);
        mark(
            &mut record,
            JobState::Pending,
            Some(SegmentNote {
                end: Some(SegmentEnd::Preemption),
                checkpoint: None,
            }),
        );
        mark(&mut record, JobState::Running, None);
        mark(&mut record, JobState::Complete, None);
        let ends: Vec<_> = record.segments().iter().map(|s| s.ended()).collect();
        assert_eq!(
            ends,
            [
                Some(SegmentEnd::Wall),
                Some(SegmentEnd::Preemption),
                Some(SegmentEnd::Done)
            ]
        );
        assert_eq!(record.restarts(), 2);
        assert_eq!(record.segments()[0].checkpoint(), Some("ckpt/step-10.pt"));
        assert!(record.segments().iter().all(|s| s.job() == "42"));
        assert!(record.segments().iter().all(|s| s.ended_at().is_some()));
        assert_eq!(record.segments()[0].nodes(), ["n1".to_string()]);
    }

    #[test]
    fn a_record_without_resume_keeps_no_segments() {
        let spec = JobSpec::new("short", "true");
        let mut record = JobRecord::new(
            JobId::mint_for(&spec),
            &spec,
            RemotePath::parse_for("results_dir", "/r/short").unwrap(),
        )
        .unwrap();
        mark(&mut record, JobState::Running, None);
        mark(&mut record, JobState::Pending, None);
        mark(&mut record, JobState::Running, None);
        assert!(record.segments().is_empty());
        assert_eq!(record.restarts(), 0);
    }

    #[test]
    fn running_again_after_a_lost_answer_is_the_same_segment() {
        let mut record = resumable();
        mark(&mut record, JobState::Running, None);
        mark(&mut record, JobState::Unknown, None);
        mark(&mut record, JobState::Running, None);
        assert_eq!(record.segments().len(), 1);
        assert_eq!(record.restarts(), 0);
        mark(&mut record, JobState::Canceled, None);
        assert_eq!(record.segments()[0].ended(), Some(SegmentEnd::Canceled));
    }

    #[test]
    fn an_older_record_reads_as_it_is_and_segments_round_trip() {
        let mut record = resumable();
        let mut older = serde_json::to_value(&record).unwrap();
        older["schema_version"] = serde_json::json!(3);
        assert!(older.get("segments").is_none() && older.get("restarts").is_none());
        let read: JobRecord = serde_json::from_value(older).unwrap();
        assert_eq!(read.schema_version(), 3);
        assert!(read.segments().is_empty());
        assert_eq!(read.restarts(), 0);
        mark(&mut record, JobState::Running, None);
        mark(&mut record, JobState::Pending, None);
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains("\"restarts\":1"), "{json}");
        let back: JobRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, record);
    }
}
