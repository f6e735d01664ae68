//! Pipeline and sweep: train -> evaluate -> export, each stage waiting on the scheduler
//! for the one before (never on this program), and after training a sweep of four
//! tasks, two at a time, each seeing its own parameter values. One watch follows them
//! all; infrastructure failures are retried (a failed sweep task alone), and a retried
//! stage is followed by the stages after it.
//!
//! ```text
//! eval "$(testbed/env)"          # or the variables of a real cluster (see README)
//! cargo run --example pipeline
//! ```
//!
//! Exits 0 when everything COMPLETEd, 1 otherwise, 2 on bad configuration.

use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use slurm_run::prelude::*;
use slurm_run::Scalar;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("pipeline: {error}");
            ExitCode::from(2)
        }
    }
}

/// A small job: one GPU, one CPU, ten minutes.
fn stage(name: &str, command: &str) -> Result<JobSpec> {
    let mut spec = JobSpec::new(name, command);
    spec.gpus_per_node = Some(1);
    spec.cpus_per_task = Some(1);
    spec.time = Some(WallTime::parse("00:10:00")?);
    Ok(spec)
}

async fn run() -> Result<ExitCode> {
    let config = SlurmConfig::from_env()?;
    // Records where SLURM_RUN_RECORDS says (default: the state folder's SQLite database).
    let store = RecordsLocation::from_env(&config.state_dir)?.open()?;
    let ssh = Ssh2TransportBuilder::from_env()?.build()?;
    let backend = SlurmBackend::new(ssh, HandlebarsRenderer::new(), store, config);

    // 1. The pipeline: each stage names the one before; SLURM enforces the order.
    let train = backend
        .submit(
            &stage("train", "sleep 2; echo trained")?,
            SubmitOptions::default(),
        )
        .await?;
    let after = |record: &JobRecord| SubmitOptions {
        after: vec![Dependency::ok(record.id().clone())],
        ..SubmitOptions::default()
    };
    let evaluate = backend
        .submit(&stage("evaluate", "echo evaluated")?, after(&train))
        .await?;
    let export = backend
        .submit(&stage("export", "echo exported")?, after(&evaluate))
        .await?;

    // 2. A sweep after training: a grid of 2 x 2 values, two tasks at a time. The
    //    values reach each task's environment from one staged file.
    let mut sweep = stage("sweep", r#"echo "task $TASK_INDEX: lr=$LR batch=$BATCH""#)?;
    sweep.sweep = Some(Sweep::Grid(
        [
            (
                "LR".to_string(),
                vec![Scalar("0.1".into()), Scalar("0.01".into())],
            ),
            (
                "BATCH".to_string(),
                vec![Scalar("32".into()), Scalar("64".into())],
            ),
        ]
        .into(),
    ));
    sweep.array = Some(ArraySpec {
        max_parallel: Some(2),
        ..ArraySpec::default()
    });
    let sweep = backend.submit(&sweep, after(&train)).await?;
    for record in [&train, &evaluate, &export, &sweep] {
        println!("submitted {} ({})", record.id(), record.state());
    }

    // 3. One watch for all of them.
    let ids: Vec<JobId> = [&train, &evaluate, &export, &sweep]
        .iter()
        .map(|r| r.id().clone())
        .collect();
    let options = WatchOptions {
        interval: Duration::from_secs(1),
        retry: Some(RetryPolicy::default()),
        ..WatchOptions::default()
    };
    let mut latest = ids.clone();
    let mut events = backend.watch(&ids, options);
    while let Some(event) = events.next().await {
        match event? {
            WatchEvent::Transition { from, status } => {
                println!("{}: {from} -> {}", status.id(), status.state());
            }
            WatchEvent::Retried { previous, record } => {
                println!("{previous}: retried as {}", record.id());
                for id in latest.iter_mut().filter(|id| **id == previous) {
                    *id = record.id().clone();
                }
            }
            WatchEvent::Waiting { from, status } => {
                let now = status.native().and_then(|n| n.category);
                println!(
                    "{}: still {}: {from} -> {}",
                    status.id(),
                    status.state(),
                    now.map_or("?", |c| c.as_str())
                );
            }
            WatchEvent::Dropped { id, reason } => {
                println!("{id}: no longer watched: {reason}");
            }
            WatchEvent::Unanswered {
                reason, retry_in, ..
            } => {
                println!("the cluster did not answer ({reason}); asking again in {retry_in:?}");
            }
        }
    }

    // 4. What each ended as; the sweep task by task, with its log.
    let mut ok = true;
    for id in &latest {
        let record = backend.record(id).await?;
        ok &= record.state() == JobState::Complete;
        println!("{id}: {}", record.state());
        for (state, tasks) in record.task_groups() {
            println!("  tasks {tasks}: {state}");
        }
        for task in record.tasks().keys() {
            let options = LogOptions {
                task: Some(*task),
                tail: 5,
                ..LogOptions::default()
            };
            print!("  {}", backend.logs(id, options).await?);
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
