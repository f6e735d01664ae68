//! What the SLURM backend's unit tests share: a mockall transport for fault injection,
//! one configurable fake renderer, a backend as after a passed preflight, and builders
//! of the cluster's answers (settle, poll, forget) and readers of what was sent.

use std::time::Duration;

use async_trait::async_trait;
use mockall::mock;

use super::facts::PartitionInfo;
use super::{SlurmBackend, SlurmConfig};
use crate::record::{JobId, JobRecord, MemoryRecordStore, RecordStore};
use crate::redact::SecretRegistry;
use crate::render::{Renderer, ScriptContext, TemplateKind};
use crate::spec::{JobSpec, WallTime};
use crate::storage::RemotePath;
use crate::transport::{Command, Output, Transport};
use crate::Result;

/// The backend of these tests.
pub(super) type TestBackend = SlurmBackend<MockRemote, FakeRenderer, MemoryRecordStore>;

/// A renderer that writes what a test looks for: the job name, and with `env` the
/// dependency, the probe's knobs file, whether it is a probe, and the extra env (one
/// `export` a line); it lints nothing.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FakeRenderer {
    env: bool,
}

impl FakeRenderer {
    /// Renders the job name only.
    pub(super) fn names() -> Self {
        FakeRenderer { env: false }
    }

    /// Renders the name, the dependency, the knobs file, the probe and the extra env.
    pub(super) fn with_env() -> Self {
        FakeRenderer { env: true }
    }
}

impl Renderer for FakeRenderer {
    fn render(&self, _: TemplateKind, context: &ScriptContext) -> Result<String> {
        let mut script = format!("#!/bin/bash\n# {}\n", context.job_name);
        if !self.env {
            return Ok(script);
        }
        if let Some(dependency) = &context.dependency {
            script.push_str(&format!("#SBATCH --dependency={dependency}\n"));
        }
        if let Some(file) = &context.knobs_file {
            script.push_str(&format!("# knobs from {file}\n"));
        }
        if context.probe {
            script.push_str("# the NCCL probe's ladder\n");
        }
        for var in &context.extra_env {
            script.push_str(&format!("export {}={}\n", var.name, var.value));
        }
        Ok(script)
    }
    fn lint(&self, _: &str, _: &SecretRegistry) -> Result<()> {
        Ok(())
    }
}

/// A backend over `remote` rendering names only, before any preflight.
pub(super) fn unprepared_backend(remote: MockRemote) -> TestBackend {
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir("/nonexistent")
        .build()
        .unwrap();
    SlurmBackend::new(
        remote,
        FakeRenderer::names(),
        MemoryRecordStore::new(),
        config,
    )
}

/// A backend over `remote` rendering names only, as after a passed preflight.
pub(super) fn backend(remote: MockRemote) -> TestBackend {
    prepared_backend(
        remote,
        FakeRenderer::names(),
        std::path::Path::new("/nonexistent"),
    )
}

/// A backend as after a passed preflight (no preflight round trip in these tests),
/// rendering with `renderer`, caching knobs under `state_dir`.
pub(super) fn prepared_backend(
    remote: MockRemote,
    renderer: FakeRenderer,
    state_dir: &std::path::Path,
) -> TestBackend {
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir(state_dir)
        .with_reconcile_wait(Duration::from_millis(10))
        .build()
        .unwrap();
    let backend = SlurmBackend::new(remote, renderer, MemoryRecordStore::new(), config);
    seed_preflight(&backend, vec!["n1".into(), "n2".into()]);
    backend
}

/// What a passed preflight learns: partition `gpu` (4 h, `nodes`), the results root,
/// the cluster's name.
pub(super) fn seed_preflight<R, S>(backend: &SlurmBackend<MockRemote, R, S>, nodes: Vec<String>)
where
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    backend.facts().change(|facts| {
        facts.base_checked = true;
        facts.cluster_name = Some("unit".into());
        facts.results_root = Some(RemotePath::parse("/shared/results").unwrap());
        facts.partitions.insert(
            "gpu".into(),
            PartitionInfo {
                up: true,
                max_time: Some(WallTime::from_hours(4)),
                nodes,
            },
        );
    });
}

mock! {
    pub(super) Remote {}
    #[async_trait]
    impl Transport for Remote {
        async fn run(&self, command: &Command) -> Result<Output>;
    }
    impl std::fmt::Debug for Remote {
        fn fmt<'a>(&self, f: &mut std::fmt::Formatter<'a>) -> std::fmt::Result;
    }
}

pub(super) fn output(status: i32, stdout: &str, stderr: &str) -> Output {
    Output {
        status,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
    }
}

/// The record names (and attempt counts) a settle command asks about, from its stdin.
pub(super) fn settle_names(command: &Command) -> Vec<(String, u32)> {
    String::from_utf8_lossy(command.stdin_bytes().unwrap_or_default())
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let _folder = fields.next()?;
            let name = fields.next()?.to_string();
            let attempts = fields.next()?.parse().ok()?;
            Some((name, attempts))
        })
        .collect()
}

/// What the fake cluster says of one attempt in a settle.
#[derive(Clone, Copy)]
pub(super) enum Fence {
    /// Never reached sbatch (the fence took its folder).
    Fenced,
    /// sbatch ran and printed this (exit status, stdout, stderr).
    Done(i32, &'static str, &'static str),
}

/// A settle answer: `fence(attempt)` for every attempt of every record, then squeue
/// and sacct listing `squeue` / `sacct` as jobs carrying each record's name (`None`:
/// that tool failed, as when the controller or the database is unreachable).
pub(super) fn settle_answer(
    command: &Command,
    fence: impl Fn(u32) -> Fence,
    squeue: Option<&[&str]>,
    sacct: Option<&[&str]>,
) -> Output {
    let mut text = String::from("@@begin 0\n");
    let names = settle_names(command);
    for (name, attempts) in &names {
        let mut all_fenced = true;
        for n in 1..=*attempts {
            match fence(n) {
                Fence::Fenced => text.push_str(&format!("O {name} {n} fenced\n")),
                Fence::Done(rc, out, err) => {
                    all_fenced = false;
                    let hex_or_dash = |t: &str| {
                        if t.is_empty() {
                            "-".to_string()
                        } else {
                            hex::encode(t)
                        }
                    };
                    text.push_str(&format!(
                        "O {name} {n} done {rc} {} {}\n",
                        hex_or_dash(out),
                        hex_or_dash(err)
                    ))
                }
            }
        }
        if all_fenced {
            text.push_str(&format!("O {name} forgot\n"));
        }
    }
    text.push_str("@@end 0 0\n");
    for (part, listing, tool) in [(1, squeue, "squeue"), (2, sacct, "sacct")] {
        text.push_str(&format!("@@begin {part}\n"));
        match listing {
            Some(ids) => {
                for (name, _) in &names {
                    for id in ids {
                        text.push_str(&format!("O {id}|{name}\n"));
                    }
                }
                text.push_str(&format!("@@end {part} 0\n"));
            }
            None => {
                let why = if tool == "squeue" {
                    "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
                } else {
                    "sacct: error: Problem talking to the database: Connection refused"
                };
                text.push_str(&format!("E {why}\n@@end {part} 1\n"));
            }
        }
    }
    output(0, &text, "")
}

pub(super) fn is_submit(command: &Command) -> bool {
    command.label().starts_with("submit ")
}

pub(super) fn is_settle(command: &Command) -> bool {
    command.label().starts_with("settle ")
}

/// The attempt number a submit command sends (its third parameter).
pub(super) fn attempt_of(command: &Command) -> String {
    // bash -c TEXT NAME root id attempt limit image...
    command.get_args()[5].clone()
}

pub(super) fn is_forget(command: &Command) -> bool {
    command.label().starts_with("round trip of ")
        && command.get_args().iter().any(|a| a == "forget-secrets")
}

/// Answers a `forget-secrets` round trip: every sidecar is gone.
pub(super) fn forget_answer(command: &Command) -> Output {
    let args = command.get_args();
    let at = args.iter().position(|a| a == "forget-secrets").unwrap();
    let names: Vec<&String> = args[at + 1..].iter().skip(1).step_by(2).collect();
    let mut text = String::from("@@begin 0\n");
    for name in names {
        text.push_str(&format!("O {name}\n"));
    }
    text.push_str("@@end 0 0\n");
    output(0, &text, "")
}

/// The batch script inside a submit's staging archive.
pub(super) fn staged_script(command: &Command) -> String {
    let mut archive = tar::Archive::new(command.stdin_bytes().unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        if path.contains("/sbatch/") {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            return text;
        }
    }
    panic!("no batch script staged");
}

/// A new record of `spec` (SUBMITTING) in a job folder under `/shared/results`.
pub(super) fn record_of(spec: &JobSpec) -> JobRecord {
    let id = JobId::mint_for(spec);
    let dir = RemotePath::parse("/shared/results")
        .unwrap()
        .join(id.as_str())
        .unwrap();
    JobRecord::new(id, spec, dir).unwrap()
}

/// A record a submit left SUBMITTING (its process died after sbatch, or it ended
/// unsettled), `age` seconds old, with one counted attempt.
pub(super) fn left_submitting(
    backend: &TestBackend,
    name: &str,
    age: i64,
) -> crate::record::JobRecord {
    let mut record = record_of(&JobSpec::new(name, "true"));
    record.submit_attempts = Some(1);
    record.submitted_at -= chrono::Duration::seconds(age);
    backend.store().open(&record).unwrap();
    record
}

pub(super) fn is_poll(command: &Command) -> bool {
    command.label().starts_with("poll ")
}

/// A poll answer: squeue lists `line` (`ID|STATE|REASON|NODES|NAME`), sacct nothing.
pub(super) fn poll_answer(line: &str) -> Output {
    output(
        0,
        &format!("@@begin 0\nO {line}\n@@end 0 0\n@@begin 1\n@@end 1 0\n"),
        "",
    )
}

/// What a fake transport saw staged, shared with the test.
pub(super) type Scripts = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;
