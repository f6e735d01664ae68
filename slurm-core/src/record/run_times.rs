//! How the scheduler's times and usage of a run reach a record
//! ([`JobRecord::note_timeline`], [`JobRecord::note_usage`]): its timeline and usage, and
//! the segment of that run.

use chrono::Duration;

use super::{JobRecord, Timeline, Usage};

impl JobRecord {
    /// Take the scheduler's `times` of the job's newest run: the record's timeline, and
    /// the segment of that run (the last one of the job, started near the time the
    /// scheduler says). Whether anything changed.
    pub(crate) fn note_timeline(&mut self, times: &Timeline) -> bool {
        let mut changed = self.timeline.take(times);
        let job = self.backend_ref.as_ref().map(|r| r.native_id.clone());
        let Some(started) = self.timeline.started_at else {
            return changed;
        };
        let near = Duration::minutes(10);
        let timeline = self.timeline;
        if let Some(segment) = self
            .segments
            .iter_mut()
            .rev()
            .find(|s| Some(&s.job) == job.as_ref())
            .filter(|s| (s.started_at - started).abs() <= near)
        {
            changed |= segment.timeline.take(&timeline);
        }
        changed
    }

    /// Take what each run of the job's newest scheduler job used (`runs`, oldest first):
    /// the record's usage is their sum, and each run's usage goes to the segment of that
    /// run (the segment of that scheduler job started near the run's start). Whether
    /// anything changed.
    pub(crate) fn note_usage(&mut self, runs: &[Usage]) -> bool {
        let Some(total) = Usage::sum(runs) else {
            return false;
        };
        let mut changed = self.usage.as_ref() != Some(&total);
        self.usage = Some(total);
        let job = self.backend_ref.as_ref().map(|r| r.native_id.clone());
        let near = Duration::minutes(10);
        for run in runs {
            let Some(started) = run.started_at else {
                continue;
            };
            if let Some(segment) =
                self.segments.iter_mut().rev().find(|s| {
                    Some(&s.job) == job.as_ref() && (s.started_at - started).abs() <= near
                })
            {
                if segment.usage.as_ref() != Some(run) {
                    segment.usage = Some(run.clone());
                    changed = true;
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use crate::record::{BackendRef, JobId, JobRecord, Mark, Timeline, TransitionSource};
    use crate::spec::JobSpec;
    use crate::state::JobState;
    use crate::storage::RemotePath;

    #[test]
    fn the_schedulers_times_reach_the_record_and_the_segment_of_that_run() {
        let spec = JobSpec::from_yaml_str(
            "name: times\ncommand: \"true\"\ntime: \"01:00:00\"\nresume: {max_restarts: 2}\n",
        )
        .unwrap();
        let id = JobId::mint_for(&spec);
        let dir = RemotePath::parse("/shared/results").unwrap();
        let mut record = JobRecord::new(id, &spec, dir).unwrap();
        let mark = |state| Mark::new(state, TransitionSource::Poll);
        record
            .apply_mark(
                mark(JobState::Pending).backend_ref(BackendRef::new("77")),
                None,
            )
            .unwrap();
        record.apply_mark(mark(JobState::Running), None).unwrap();
        let started = record.segments()[0].started_at();
        let at = |secs: i64| Some(started + chrono::Duration::seconds(secs));
        let times = Timeline::new(at(-60), at(-30), at(-2), at(40));
        record
            .apply_mark(mark(JobState::Complete).times(times), None)
            .unwrap();
        assert_eq!(*record.timeline(), times);
        assert_eq!(*record.segments()[0].timeline(), times);
        // A later read of the same run changes nothing; a far start is another run's.
        assert!(!record.note_timeline(&times));
        let other = Timeline::new(
            Some(Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap()),
            None,
            Some(Utc.with_ymd_and_hms(2020, 1, 1, 0, 5, 0).unwrap()),
            None,
        );
        assert!(record.note_timeline(&other));
        assert_eq!(*record.segments()[0].timeline(), times);
    }
}
