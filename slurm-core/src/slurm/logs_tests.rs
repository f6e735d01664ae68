//! Following logs against a mock cluster.
use std::time::Duration;

use super::testkit::*;
use crate::backend::Backend;
use crate::record::{BackendRef, RecordStore};
use crate::spec::JobSpec;
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::transport::Output;

#[tokio::test]
async fn following_a_large_log_reads_bounded_chunks_from_the_last_offset() {
    // Issue 11, item 12: a 2.5 MiB log is read in chunks of at most 1 MiB, each from
    // where the last stopped; the stream ends once everything is read.
    let size: u64 = 2 * 1024 * 1024 + 512 * 1024;
    let offsets = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let seen = std::sync::Arc::clone(&offsets);
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| c.get_args().iter().any(|a| a == "read-from"))
        .returning(move |c| {
            let args = c.get_args();
            let at = args.iter().position(|a| a == "read-from").unwrap();
            let offset: u64 = args[at + 2].parse().unwrap();
            let most: u64 = args[at + 3].parse().unwrap();
            seen.lock().unwrap().push((offset, most));
            let n = (size - offset).min(most) as usize;
            let mut stdout = format!("{size}\n").into_bytes();
            stdout.extend(std::iter::repeat_n(b'x', n));
            Ok(Output {
                status: 0,
                stdout,
                stderr: Vec::new(),
            })
        });
    let backend = backend(remote);
    let spec = JobSpec::new("biglog", "true");
    let id = crate::record::JobId::mint_for(&spec);
    let dir = RemotePath::parse("/shared/results")
        .unwrap()
        .join(id.as_str())
        .unwrap();
    let record = crate::record::JobRecord::new(id.clone(), &spec, dir).unwrap();
    backend.store().open(&record).unwrap();
    backend
        .store()
        .mark(
            &id,
            crate::record::Mark::new(JobState::Complete, crate::record::TransitionSource::Poll)
                .backend_ref(BackendRef::new("77")),
        )
        .unwrap();
    let chunks: Vec<String> = futures::StreamExt::collect::<Vec<_>>(backend.follow_logs(
        &id,
        crate::backend::LogOptions::of(crate::backend::LogStream::Out),
        Duration::from_millis(1),
    ))
    .await
    .into_iter()
    .map(|c| c.unwrap())
    .collect();
    let total: usize = chunks.iter().map(String::len).sum();
    assert_eq!(total as u64, size);
    assert!(chunks.iter().all(|c| c.len() <= 1024 * 1024));
    let offsets = offsets.lock().unwrap();
    let starts: Vec<u64> = offsets.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        starts[..3],
        [0, 1024 * 1024, 2 * 1024 * 1024],
        "each read starts where the last stopped"
    );
    assert!(starts[3..].iter().all(|o| *o == size), "{starts:?}");
}
