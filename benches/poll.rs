//! The poll against the test bed: one `status_many` of 1, 100, 1,000 and 10,000 tracked
//! pending jobs, against the bare squeue it needs over the same open connection (an
//! explicit id list, and `--me`; the faster of the two is the limit) and against the
//! reference's way (one fresh `ssh ... sacct -j ID` per job; at 1,000 and 10,000 jobs
//! extrapolated from a sample of [`FRESH_SAMPLE`] jobs). Then a cold `slurmctl status` of
//! 100 jobs (a new process: connect, one poll, print) against one fresh
//! `ssh host squeue` of the same jobs. Writes the `poll` area of `BENCHMARKS.md`.
//!
//! `cargo bench --bench poll` (needs the test bed, whose slurm.conf lets it hold the
//! 10,000 pending jobs; `make bench` brings it up).

use std::time::{Duration, Instant};

use std::sync::Arc;

use slurm_core::{Backend, Command, JobId, RecordStore, SlurmBackend, SlurmJobId, Transport};
use slurm_records::testing::PostgresFixture;
use slurm_records::{PostgresRecordStore, SqliteRecordStore};
use slurm_render::HandlebarsRenderer;
use slurm_run_testsupport::backend::Harness;
use slurm_run_testsupport::bench::cluster::{
    bare_once, cancel_all, fresh_ssh, fresh_ssh_each, held_jobs, idle_shell, over_connection,
    track, user_rpcs,
};
use slurm_run_testsupport::bench::{median, Area, Baseline, Row, Series};
use slurm_run_testsupport::{backend, examples};

/// The sizes measured.
const SIZES: [usize; 4] = [1, 100, 1_000, 10_000];

/// How many ended jobs the sacct figure polls.
const ENDED: usize = 100;

/// Above this many jobs the per-job ssh baseline is extrapolated from a sample this big.
const FRESH_SAMPLE: usize = 30;

/// The squeue format of the poll.
const FORMAT: &str = "--format=%i|%T|%r|%N|%j";

/// The sacct format of the poll.
const SACCT_FORMAT: &str =
    "--format=JobID,JobIDRaw,State,ExitCode,Reason,Submit,Start,End,NodeList,JobName";

fn ids_arg(ids: &[SlurmJobId]) -> String {
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    format!("--jobs={}", list.join(","))
}

/// The bare squeue of the poll, of `ids`.
fn squeue_of(ids: &[SlurmJobId]) -> Command {
    Command::new("squeue").args([
        "--noheader".to_string(),
        "--states=all".to_string(),
        FORMAT.to_string(),
        ids_arg(ids),
    ])
}

/// The medians of interleaved samples: slurm-run's poll, and the two bare squeues of the
/// same jobs (by id list and by `--me`) taken right after each of its samples.
struct InterleavedPolls {
    library: Duration,
    list: Duration,
    by_me: Duration,
}

impl InterleavedPolls {
    /// The cheaper bare squeue (the limit): its name and median.
    fn bare(&self) -> (&'static str, Duration) {
        if self.list <= self.by_me {
            ("squeue --jobs=<ids>", self.list)
        } else {
            ("squeue --me", self.by_me)
        }
    }
}

/// `samples` polls of `ids` through `backend`, each followed by the bare `by_list` and
/// `me` squeues, every sample on an idle shell: a load that comes and goes (slurmdbd
/// still recording the held jobs just made) falls on slurm-run's samples and the bare
/// commands' alike. Asserts that each poll is one round trip.
/// With `renamed`, that job's name is changed before each sample (untimed), so squeue's
/// rows differ from the last poll's at every poll.
async fn interleaved_polls<B: Backend>(
    h: &Harness,
    backend: &B,
    ids: &[JobId],
    by_list: &Command,
    me: &Command,
    samples: usize,
    renamed: Option<&SlurmJobId>,
) -> InterleavedPolls {
    backend.status_many(ids).await.expect("warm-up poll");
    bare_once(h, by_list).await;
    bare_once(h, me).await;
    let (mut times, mut lists, mut mes) = (Vec::new(), Vec::new(), Vec::new());
    for sample in 0..samples {
        if let Some(job) = renamed {
            let rename = Command::new("scontrol").args([
                "update".to_string(),
                format!("JobId={job}"),
                format!("JobName=bench-held-renamed-{sample}"),
            ]);
            let out = h.transport.run(&rename).await.expect("scontrol update");
            assert!(out.success(), "{}", out.stderr_text());
        }
        h.transport.reset();
        idle_shell().await;
        let start = Instant::now();
        let statuses = backend.status_many(ids).await.expect("poll");
        times.push(start.elapsed());
        assert_eq!(statuses.len(), ids.len());
        assert_eq!(h.transport.count(), 1, "one round trip per poll");
        lists.push(bare_once(h, by_list).await);
        mes.push(bare_once(h, me).await);
    }
    InterleavedPolls {
        library: median(times),
        list: median(lists),
        by_me: median(mes),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // built by `cargo test --all-targets`; runs only under `cargo bench`
    }
    let h = backend::harness();
    let mut area = Area::new(
        "poll",
        "bare squeue over the same connection",
        "a fresh `ssh` per command",
    );
    let version = h
        .transport
        .run(&Command::new("sinfo").arg("--version"))
        .await
        .expect("sinfo --version");
    area.machine.push((
        "Slurm (test bed)".into(),
        version.stdout_text().trim().to_string(),
    ));
    let started = Instant::now();
    let all = held_jobs(&h, *SIZES.last().unwrap()).await;
    let records = track(&h, &all);
    println!(
        "{} held jobs and their records made in {:.0} s",
        all.len(),
        started.elapsed().as_secs_f64()
    );

    let mut library_series = Series {
        name: "slurm-run (one round trip)".into(),
        points: Vec::new(),
    };
    let mut list_series = Series {
        name: "bare squeue --jobs=<ids>".into(),
        points: Vec::new(),
    };
    let mut me_series = Series {
        name: "bare squeue --me".into(),
        points: Vec::new(),
    };
    let mut fresh_series = Series {
        name: "one fresh ssh per job (hollow: extrapolated)".into(),
        points: Vec::new(),
    };
    let me = Command::new("squeue").args(["--noheader", "--states=all", FORMAT, "--me"]);
    for n in SIZES {
        let samples = if n >= 10_000 { 5 } else { 9 };
        let ids = &records[..n];
        let jobs = &all[..n];
        let by_list = squeue_of(jobs);
        let polls = interleaved_polls(&h, &h.backend, ids, &by_list, &me, samples, None).await;
        let (library, list, by_me) = (polls.library, polls.list, polls.by_me);
        let (bare_what, bare) = polls.bare();
        let line = |id: &SlurmJobId| format!("sacct -j {id} -X -n -o State%30");
        let fresh = if n <= 100 {
            Baseline::measured(
                "ssh sacct -j ID per job",
                fresh_ssh_each(&h.testbed, jobs.iter().map(line)),
            )
        } else {
            let step = n / FRESH_SAMPLE;
            let sample = fresh_ssh_each(
                &h.testbed,
                jobs.iter().step_by(step).take(FRESH_SAMPLE).map(line),
            );
            Baseline::extrapolated("ssh sacct -j ID per job", sample / FRESH_SAMPLE as u32, n)
        };
        library_series
            .points
            .push((n as f64, slurm_run_testsupport::bench::ms(library), false));
        list_series
            .points
            .push((n as f64, slurm_run_testsupport::bench::ms(list), false));
        me_series
            .points
            .push((n as f64, slurm_run_testsupport::bench::ms(by_me), false));
        fresh_series
            .points
            .push((n as f64, fresh.ms, fresh.extrapolated));
        area.push(
            Row::new(format!("poll of {n} pending jobs"), library)
                .bare(Baseline::measured(bare_what, bare))
                .fresh(fresh)
                .aim(1.2)
                .note(format!(
                    "squeue --jobs=<ids> {}, --me {}",
                    slurm_run_testsupport::bench::report::time(slurm_run_testsupport::bench::ms(
                        list
                    )),
                    slurm_run_testsupport::bench::report::time(slurm_run_testsupport::bench::ms(
                        by_me
                    )),
                )),
        );
    }
    area.series = vec![library_series, list_series, me_series, fresh_series];

    // The same polls with the records in each database store, over the same connection:
    // a watch's poll in which nothing changed, and one after a job's row changed.
    let copies = database_copies(&h, &records);
    for (name, backend, _keep) in &copies {
        for (n, renamed) in [(100, None), (10_000, None), (10_000, Some(&all[0]))] {
            let by_list = squeue_of(&all[..n]);
            let polls =
                interleaved_polls(&h, backend, &records[..n], &by_list, &me, 5, renamed).await;
            let (bare_what, bare) = polls.bare();
            let row = match renamed {
                None => Row::new(
                    format!("poll of {n} pending jobs, records in {name}"),
                    polls.library,
                )
                .aim(1.2),
                Some(_) => Row::new(
                    format!(
                        "poll of {n} pending jobs, records in {name}, a row changed before each"
                    ),
                    polls.library,
                )
                .note("a full poll: squeue's rows differ from the last poll's".to_string()),
            };
            area.push(row.bare(Baseline::measured(bare_what, bare)));
        }
    }
    drop(copies);

    // The controller's load: the RPCs one poll cycle sends slurmctld and slurmdbd, beside
    // one `squeue -j` and one `sacct -j` per job over the same connection (measured for
    // up to 100 jobs, counted for a sample of FRESH_SAMPLE and scaled above).
    let mut load = vec![
        "The load on the scheduler (RPCs counted by `sdiag` and `sacctmgr show stats` for the \
         job user; one poll cycle of held jobs, squeue settles them all; `why` of the same \
         jobs, asked on request and never by the poll):\n\n\
         | jobs | slurm-run, one poll: slurmctld / slurmdbd | `why`: slurmctld / slurmdbd | one `squeue -j` per job | one `sacct -j` per job |\n\
         |---|---|---|---|---|"
            .to_string(),
    ];
    for n in [1, 100, 10_000] {
        let (ctld, dbd) = rpcs_of(&h, async {
            h.backend.status_many(&records[..n]).await.expect("poll");
        })
        .await;
        let (why_ctld, why_dbd) = rpcs_of(&h, async {
            h.backend.why(&records[..n]).await.expect("why");
        })
        .await;
        let sample: Vec<&SlurmJobId> = if n <= 100 {
            all[..n].iter().collect()
        } else {
            all[..n]
                .iter()
                .step_by(n / FRESH_SAMPLE)
                .take(FRESH_SAMPLE)
                .collect()
        };
        let scale = n as f64 / sample.len() as f64;
        let per_job = |program: &'static [&'static str]| {
            let sample = &sample;
            let h = &h;
            async move {
                rpcs_of(h, async {
                    for id in sample.iter() {
                        let out = h
                            .transport
                            .run(
                                &Command::new(program[0])
                                    .args(program[1..].iter().copied())
                                    .arg(format!("--jobs={id}")),
                            )
                            .await
                            .expect("a bare command");
                        assert!(out.success(), "{program:?}: {}", out.stderr_text());
                    }
                })
                .await
            }
        };
        let (squeue_ctld, squeue_dbd) = per_job(&["squeue", "--noheader"]).await;
        let (sacct_ctld, sacct_dbd) =
            per_job(&["sacct", "--noheader", "-X", "--format=State"]).await;
        let shown = |rpcs: u64| {
            let scaled = (rpcs as f64 * scale).round();
            if scale > 1.0 {
                format!("{scaled:.0} (scaled from {})", sample.len())
            } else {
                format!("{scaled:.0}")
            }
        };
        load.push(format!(
            "| {n} | {ctld} / {dbd} | {why_ctld} / {why_dbd} | {} / {} | {} / {} |",
            shown(squeue_ctld),
            shown(squeue_dbd),
            shown(sacct_ctld),
            shown(sacct_dbd)
        ));
    }
    area.notes.push(load.join("\n"));

    // A cold `slurmctl status` of 100 jobs: a new process that connects, polls once and
    // prints, against one fresh `ssh host squeue` of the same 100 jobs.
    let slurmctl = examples::example("slurmctl");
    let env = h.testbed.client_env(&h.backend.config().state_dir);
    let mut args: Vec<&str> = vec!["status"];
    args.extend(records[..100].iter().map(|r| r.as_str()));
    let mut cold = Vec::new();
    let mut fresh = Vec::new();
    let squeue_line = format!(
        "squeue --noheader --states=all '{FORMAT}' {}",
        ids_arg(&all[..100])
    );
    for _ in 0..7 {
        let start = Instant::now();
        let run = examples::run(&slurmctl, &args, &env, Duration::from_secs(60));
        cold.push(start.elapsed());
        run.expect_code(0);
        // Live jobs, so each run asks the cluster (ended records are answered locally).
        assert_eq!(
            run.stdout.matches("PENDING").count(),
            100,
            "every job still pending: {}",
            run.stdout
        );
        fresh.push(fresh_ssh(&h.testbed, &squeue_line));
    }
    area.push(
        Row::new("cold `slurmctl status` of 100 jobs", median(cold))
            .bare(Baseline::measured(
                "one fresh `ssh host squeue --jobs=<100 ids>`",
                median(fresh),
            ))
            .aim(2.0)
            .note("a new process: start, connect, one poll, print"),
    );
    // The sacct path: jobs that have ended, which squeue no longer settles. Each sample
    // polls fresh records of the same ended jobs (a record, once terminal, is not asked
    // about again); the bare commands are the squeue and the sacct of those ids. It
    // comes after the cold status, whose records track these jobs and must see them live.
    let ended = &all[..ENDED];
    cancel_all(&h, ended).await;
    let gone = Instant::now() + Duration::from_secs(120);
    loop {
        let probe = h
            .transport
            .run(&Command::new("sacct").args([
                "--noheader".to_string(),
                "-X".to_string(),
                "--format=State".to_string(),
                ids_arg(ended),
            ]))
            .await
            .expect("sacct");
        let rows = probe.stdout_text();
        let done = rows.lines().filter(|l| l.contains("CANCELLED")).count();
        if done == ENDED {
            break;
        }
        assert!(
            Instant::now() < gone,
            "accounting never had the {ENDED} cancelled jobs"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut times = Vec::new();
    for _ in 0..9 {
        let fresh_records = track(&h, ended);
        h.transport.reset();
        idle_shell().await;
        let start = Instant::now();
        let statuses = h.backend.status_many(&fresh_records).await.expect("poll");
        times.push(start.elapsed());
        assert_eq!(h.transport.count(), 1, "one round trip per poll");
        assert!(
            statuses
                .iter()
                .all(|s| s.state() == slurm_core::JobState::Canceled),
            "every ended job read CANCELED from accounting"
        );
    }
    let squeue = over_connection(&h, &squeue_of(ended), 9).await;
    let sacct = over_connection(
        &h,
        &Command::new("sacct").args([
            "--noheader".to_string(),
            "--parsable2".to_string(),
            "--duplicates".to_string(),
            SACCT_FORMAT.to_string(),
            ids_arg(ended),
        ]),
        9,
    )
    .await;
    let line = |id: &SlurmJobId| format!("sacct -j {id} -X -n -o State%30");
    let fresh = Baseline::measured(
        "ssh sacct -j ID per job",
        fresh_ssh_each(&h.testbed, ended.iter().map(line)),
    );
    area.push(
        Row::new(format!("poll of {ENDED} ended jobs (sacct)"), median(times))
            .bare(Baseline::measured(
                "squeue + sacct --jobs=<ids>",
                squeue + sacct,
            ))
            .fresh(fresh)
            .aim(1.2)
            .note(format!(
                "squeue {}, sacct {}",
                slurm_run_testsupport::bench::report::time(slurm_run_testsupport::bench::ms(
                    squeue
                )),
                slurm_run_testsupport::bench::report::time(slurm_run_testsupport::bench::ms(sacct)),
            )),
    );

    area.notes.push(format!(
        "Each poll is one round trip (counted); every timed sample, slurm-run's and the bare \
         command's alike, starts 20 ms after the last answer, on an idle shell (as a watch's \
         polls, seconds apart). The jobs are held, so they stay PENDING and every \
         poll asks squeue about all of them; squeue settles them, so no sacct runs. The bare \
         baseline is the faster of squeue with the explicit id list and `squeue --me` \
         (both columns in the notes), each over the same open connection. The per-job ssh \
         baseline is measured whole up to 100 jobs and extrapolated from {FRESH_SAMPLE} jobs \
         above (the reference's way would take minutes to hours there)."
    ));
    area.notes.push(
        "What stays above the bare squeue, and why. A poll of a few jobs pays for the \
         script around squeue: its own builtins (about 2 ms on this 2-core machine shared \
         with slurmctld and slurmdbd), against a squeue of one id that takes a few \
         milliseconds. Its ids travel in the request's own line (up to 256 bytes of text, \
         reaching the script as a here-string; a longer list goes as raw bytes to a `head`, \
         about 1.5 ms, which bash's byte-at-a-time reading of its input would exceed). The \
         script itself starts no bash: the long-lived shell defines each of slurm-run's \
         scripts once, as a function named by the digest of its text, and runs it in a \
         subshell of its own (a fork: no exec, no parse; its own pid, process group and \
         variables). Its frame folder is on a memory file system, and the shell makes the \
         next command's output files after each answer, while the client reads it. Up to \
         200 jobs bash decides which need sacct and writes the lists (joined, one write); \
         above, one `awk` each, and with `--me` one that keeps the tracked rows. From \
         `MINE_FROM` (64) jobs the poll asks `squeue --me`, whose cost does not grow with \
         the number tracked, so it stays near the bare command at 100 jobs. At 10,000 \
         jobs, measured apart on the test bed: the script adds about 25 ms to squeue's own \
         time on the login node (the ids into their list, 8 ms; the filter of the tracked \
         rows and the decision on sacct, each an awk over 10,000 lines; the 400 KB of rows \
         framed, 8 ms), and the client spends about 70 ms of CPU (reading 10,000 records \
         and copying each from the store's cache, parsing and matching the rows, an \
         observation and a decision per job, and freeing what the poll built: the records \
         bench's per-poll time of a 10,000-job watch is that cost without the cluster), \
         which the bare command does not do. The ended jobs' figure adds sacct, asked only \
         for the jobs squeue no longer settles."
            .to_string(),
    );
    area.notes.push(
        "A watch's poll in which nothing changed. The rows `records in SQLite` and `records \
         in PostgreSQL` poll the same jobs again and again, as a watch does: with a store \
         that tells its revision (a number every write moves), a poll of the same ids as the \
         last quiet one (it wrote nothing and needed nothing beyond squeue), the store at \
         the same revision, sends that poll's request again without its lists of jobs (the \
         login node kept them); the login node writes squeue's rows to a file of its memory \
         file system and compares them with the rows that poll kept, and when they are the \
         same bytes the answer is one line and the client returns what it answered then, \
         each status shared, not copied: nothing per job is sent, read, parsed, framed or \
         copied. What stays above the bare command is the compare (a `cmp`) and a read of \
         the store's revision, against the 400 KB of rows the bare command frames and \
         sends. The file store tells no \
         revision (an older slurm-run sharing its folder would not count its writes), so \
         the rows without a store named are full polls. The rows `a row changed before each` \
         rename one job between polls (untimed): every poll is then a full one, the cost of \
         a watch's poll in which something changed."
            .to_string(),
    );
    cancel_all(&h, &all).await;
    area.save();
}

/// The job user's RPCs to slurmctld and slurmdbd while `work` runs.
async fn rpcs_of(h: &Harness, work: impl std::future::Future<Output = ()>) -> (u64, u64) {
    let (ctld, dbd) = user_rpcs(&h.testbed);
    work.await;
    let (ctld_after, dbd_after) = user_rpcs(&h.testbed);
    (ctld_after - ctld, dbd_after - dbd)
}

/// A backend over the harness's connection with its records in one database store: the
/// store's name, the backend, and what keeps its store alive.
type DatabaseCopy = (
    &'static str,
    SlurmBackend<slurm_run_testsupport::backend::Stack, HandlebarsRenderer, Box<dyn RecordStore>>,
    Box<dyn std::any::Any>,
);

/// Backends over the harness's connection whose records (copies of `records`) are in a
/// SQLite database and in a PostgreSQL schema of the test bed's server; each with what
/// keeps its store alive.
fn database_copies(h: &Harness, records: &[JobId]) -> Vec<DatabaseCopy> {
    let kept = h
        .backend
        .store()
        .get_many(records)
        .expect("the tracked records");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteRecordStore::open(dir.path().join("records.sqlite")).unwrap();
    sqlite.open_many(&kept).unwrap();
    let url = h.testbed.get("SLURM_RUN_TEST_POSTGRES_URL").to_string();
    let schema = PostgresFixture::new(&url);
    let postgres = PostgresRecordStore::connect(schema.url()).unwrap();
    postgres.open_many(&kept).unwrap();
    let backend = |store: Box<dyn RecordStore>| {
        SlurmBackend::new(
            Arc::clone(&h.transport),
            HandlebarsRenderer::new(),
            store,
            h.backend.config().clone(),
        )
    };
    vec![
        (
            "SQLite",
            backend(Box::new(sqlite)),
            Box::new(dir) as Box<dyn std::any::Any>,
        ),
        ("PostgreSQL", backend(Box::new(postgres)), Box::new(schema)),
    ]
}
