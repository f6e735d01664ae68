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

/// A backend whose follow reads the log of a COMPLETE record through `read` (offset,
/// most bytes) -> the read-from answer; with `secret` remembered as one it submitted.
fn following(
    read: impl Fn(u64, u64) -> Output + Send + 'static,
    secret: Option<&str>,
) -> (TestBackend, crate::record::JobId) {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| c.get_args().iter().any(|a| a == "read-from"))
        .returning(move |c| {
            let args = c.get_args();
            let at = args.iter().position(|a| a == "read-from").unwrap();
            Ok(read(
                args[at + 2].parse().unwrap(),
                args[at + 3].parse().unwrap(),
            ))
        });
    let backend = backend(remote);
    let spec = JobSpec::new("follow", "true");
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
    if let Some(secret) = secret {
        let mut registry = crate::redact::SecretRegistry::new();
        registry.register("HF_TOKEN", secret);
        backend.context().secrets().remember(&id, &registry);
    }
    (backend, id)
}

/// What a follow of `id` yields, in order.
async fn follow_all(
    backend: &TestBackend,
    id: &crate::record::JobId,
) -> Vec<crate::Result<String>> {
    futures::StreamExt::collect::<Vec<_>>(backend.follow_logs(
        id,
        crate::backend::LogOptions::default(),
        Duration::from_millis(1),
    ))
    .await
}

/// A log of `text` read `cut` bytes at a time (the writer flushed mid-line).
fn in_pieces(text: &'static [u8], cut: usize) -> impl Fn(u64, u64) -> Output {
    move |offset, _| {
        let start = offset as usize;
        let end = (start + cut).min(text.len());
        let mut stdout = format!("{}\n", text.len()).into_bytes();
        stdout.extend_from_slice(&text[start..end]);
        Output {
            status: 0,
            stdout,
            stderr: Vec::new(),
        }
    }
}

#[tokio::test]
async fn a_secret_split_across_two_reads_never_comes_out_in_halves() {
    // Defect 5: each chunk was redacted alone, so a token cut by a read came out whole in
    // two unredacted halves.
    let text: &'static [u8] = b"token=hf_s3cr3tvalue9 end\n";
    for cut in [7, 12, 16] {
        let (backend, id) = following(in_pieces(text, cut), Some("hf_s3cr3tvalue9"));
        let out: String = follow_all(&backend, &id)
            .await
            .into_iter()
            .map(|c| c.unwrap())
            .collect();
        assert_eq!(out, "token=[REDACTED] end\n", "cut every {cut} bytes");
    }
}

#[tokio::test]
async fn a_character_cut_by_a_read_is_kept_whole() {
    // Defect 5: a multibyte character at a cut came out as two replacement characters.
    let text: &'static [u8] = "café crème\n".as_bytes();
    let (backend, id) = following(in_pieces(text, 4), None);
    let out: String = follow_all(&backend, &id)
        .await
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    assert_eq!(out, "café crème\n");
}

#[tokio::test]
async fn a_log_that_cannot_be_read_is_an_error_naming_why() {
    // Defect 12: a failed read during follow was swallowed as "no new text".
    let (backend, id) = following(
        |_, _| Output {
            status: 1,
            stdout: Vec::new(),
            stderr: b"tail: cannot open 'main.out' for reading: Permission denied\n".to_vec(),
        },
        None,
    );
    let items = follow_all(&backend, &id).await;
    let error = items
        .into_iter()
        .find_map(Result::err)
        .expect("the failed read is reported");
    assert!(error.to_string().contains("Permission denied"), "{error}");
}
