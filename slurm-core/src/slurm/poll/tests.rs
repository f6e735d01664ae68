//! The poll script run for real (local bash, fake squeue and sacct): what is asked of whom.

use std::collections::BTreeMap;

use super::observe::merge;
use super::request::{poll_command, poll_command_deciding, Group, MINE_FROM};
use crate::slurm::parse::SlurmJobId;
use crate::transport::{round_trip, Command, Output};

fn ids(list: &[u64]) -> Vec<SlurmJobId> {
    list.iter().map(|n| SlurmJobId::new(*n).unwrap()).collect()
}

/// A group of single jobs: `all`, of which `running` are RUNNING.
fn jobs(all: &[u64], running: &[u64]) -> Group {
    Group {
        jobs: ids(all),
        keys: ids(all).into_iter().map(|j| (j, None)).collect(),
        running: ids(running).into_iter().map(|j| (j, None)).collect(),
        expected: Vec::new(),
        failed_node: false,
    }
}

/// Stand-ins for `squeue` and `sacct` in a folder of their own: squeue prints
/// `squeue_lines`, exits `squeue_rc` and logs each `--jobs=` it is given (`mine` for
/// `--me`) to `squeue.jobs` there; sacct prints nothing and logs each `--jobs=` to
/// `sacct.jobs`.
fn fake_tools(squeue_lines: &str, squeue_rc: i32) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path();
    std::fs::write(bin.join("squeue.out"), squeue_lines).unwrap();
    std::fs::write(
        bin.join("squeue"),
        format!(
            "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" >> {dir}/squeue.jobs;; --me) echo mine >> {dir}/squeue.jobs;; esac; done\ncat {dir}/squeue.out\nexit {squeue_rc}\n",
            dir = bin.display()
        ),
    )
    .unwrap();
    std::fs::write(
        bin.join("sacct"),
        format!(
            "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" >> {}/sacct.jobs;; esac; done\n",
            bin.display()
        ),
    )
    .unwrap();
    for tool in ["squeue", "sacct"] {
        std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Runs the poll command `poll` locally, the stand-ins of `bin` first on PATH, with a
/// frame folder of its own (the long-lived shell's `__SR_FRAME`), returned beside the
/// output so the caller can read the files the script left there.
async fn run_locally(poll: &Command, bin: &std::path::Path) -> (Output, tempfile::TempDir) {
    let frame = tempfile::tempdir().unwrap();
    let output = run_in_frame(poll, bin, frame.path(), None).await;
    (output, frame)
}

/// Runs the poll command `poll` locally, the stand-ins of `bin` first on PATH, in the
/// frame folder `frame` (`__SR_FRAME`) and, with `keep`, the shell's folder that
/// outlives its commands (`__SR_KEEP`).
async fn run_in_frame(
    poll: &Command,
    bin: &std::path::Path,
    frame: &std::path::Path,
    keep: Option<&std::path::Path>,
) -> Output {
    use crate::transport::{LocalTransport, Transport};
    let mut command = Command::new("env")
        .arg(format!(
            "PATH={}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ))
        .arg(format!("__SR_FRAME={}", frame.display()));
    if let Some(keep) = keep {
        command = command.arg(format!("__SR_KEEP={}", keep.display()));
    }
    let command = command
        .arg(poll.program())
        .args(poll.get_args().iter().cloned())
        .stdin(poll.stdin_bytes().unwrap_or_default().to_vec());
    LocalTransport::new().run(&command).await.unwrap()
}

/// Runs the poll script locally against fake `squeue` / `sacct` programs (squeue
/// prints `squeue_lines` and exits `squeue_rc`; sacct prints nothing); returns the
/// two parts, every `--jobs=` squeue was given (one a line), every `--jobs=` sacct was
/// given (None when it was not run), and the files the run with bash deciding left in
/// its frame folder (the long-lived shell's `__SR_FRAME`), sorted.
async fn poll_group_locally(
    squeue_lines: &str,
    squeue_rc: i32,
    group: Group,
) -> (Vec<Output>, String, Option<String>, Vec<String>) {
    let tools = fake_tools(squeue_lines, squeue_rc);
    let bin = tools.path();
    let groups: BTreeMap<Option<String>, Group> = [(None, group)].into();
    // Once with bash deciding what needs sacct, once with awk: both must agree.
    let mut answers = Vec::new();
    let mut frames = Vec::new();
    for bash_decides_up_to in [usize::MAX, 0] {
        let poll = poll_command_deciding(&groups, bash_decides_up_to).unwrap();
        let (output, frame) = run_locally(&poll, bin).await;
        let parts = round_trip::split(&output, 2).unwrap();
        let squeue = std::fs::read_to_string(bin.join("squeue.jobs")).unwrap_or_default();
        let sacct = std::fs::read_to_string(bin.join("sacct.jobs"))
            .ok()
            .map(|j| j.trim().to_string());
        for log in ["squeue.jobs", "sacct.jobs"] {
            let _ = std::fs::remove_file(bin.join(log));
        }
        let mut made: Vec<String> = std::fs::read_dir(frame.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        made.sort();
        frames.push(made);
        answers.push((parts, squeue, sacct));
    }
    let by_awk = answers.pop().unwrap();
    let by_bash = answers.pop().unwrap();
    assert_eq!(
        by_bash.2, by_awk.2,
        "bash and awk send the same jobs to sacct"
    );
    assert_eq!(by_bash.1, by_awk.1);
    assert_eq!(
        by_bash
            .0
            .iter()
            .map(|p| (&p.stdout, p.status))
            .collect::<Vec<_>>(),
        by_awk
            .0
            .iter()
            .map(|p| (&p.stdout, p.status))
            .collect::<Vec<_>>()
    );
    (by_bash.0, by_bash.1, by_bash.2, frames.swap_remove(0))
}

#[tokio::test]
async fn jobs_squeue_settles_cost_no_sacct() {
    let (parts, _, sacct, _) = poll_group_locally(
        "1|PENDING|Priority|(null)|a\n2|RUNNING|None|n1|b\n",
        0,
        jobs(&[1, 2], &[]),
    )
    .await;
    assert_eq!(sacct, None, "all live: no sacct");
    assert!(parts[0].stdout_text().contains("2|RUNNING"));
    assert!(parts[1].stdout.is_empty() && parts[1].success());
}

#[tokio::test]
async fn a_poll_squeue_settles_makes_no_file_beyond_its_ids_and_squeues_answer() {
    // A file made costs about 140 µs on the test machine's disk, as much as the rest of
    // the script's own work on a few jobs: the lists the input does not give, the jobs
    // needing sacct when none do and the part of a sacct not run are made no more (they
    // were E.0, need.0, 1.out and 1.err). J.0 and R.0 are the input's lists.
    let (_, _, sacct, frame) = poll_group_locally(
        "1|PENDING|Priority|(null)|a\n2|RUNNING|None|n1|b\n",
        0,
        jobs(&[1, 2], &[2]),
    )
    .await;
    assert_eq!(sacct, None);
    assert_eq!(frame, ["0.err", "0.out", "J.0", "R.0"]);
}

#[tokio::test]
async fn sacct_is_asked_only_for_what_squeue_cannot_settle() {
    // 3 finished (exit code and steps from sacct), 4 gone from squeue, 5 a RUNNING
    // record pending again (a requeue: sacct says why), 6 pending as before.
    let (_, _, sacct, _) = poll_group_locally(
        "3|COMPLETED|None|n1|c\n5|PENDING|BeginTime|(null)|e\n6|PENDING|Priority|(null)|f\n",
        0,
        jobs(&[3, 4, 5, 6], &[5]),
    )
    .await;
    assert_eq!(sacct.as_deref(), Some("3,4,5"));
    let (_, _, sacct, _) = poll_group_locally("", 1, jobs(&[7, 8], &[])).await;
    assert_eq!(
        sacct.as_deref(),
        Some("7,8"),
        "squeue failed: sacct for every job"
    );
}

#[tokio::test]
async fn an_array_costs_one_squeue_until_a_task_ends_or_vanishes() {
    let job = SlurmJobId::new(40).unwrap();
    let task = |t: u32| (job, Some(t));
    let group = |running: Vec<u32>, expected: Vec<u32>| Group {
        jobs: vec![job],
        keys: expected.iter().map(|t| task(*t)).collect(),
        running: running.into_iter().map(task).collect(),
        expected: expected.into_iter().map(task).collect(),
        failed_node: false,
    };
    // Two running, the rest in the pending range: squeue settles all.
    let (parts, _, sacct, _) = poll_group_locally(
        "40_[2-7%2]|PENDING|JobArrayTaskLimit|(null)|a\n40_0|RUNNING|None|n1|a\n40_1|RUNNING|None|n2|a\n",
        0,
        group(vec![0, 1], (0..8).collect()),
    )
    .await;
    assert_eq!(sacct, None, "all live: no sacct");
    let merged = merge(&(0..8).map(task).collect::<Vec<_>>(), &parts[0], &parts[1])
        .unwrap()
        .observations;
    assert_eq!(merged.len(), 8);
    assert_eq!(merged[&task(1)].state.raw, "RUNNING");
    assert_eq!(
        merged[&task(5)].reason.as_deref(),
        Some("JobArrayTaskLimit")
    );
    // A running task gone from squeue (it ended and was purged): sacct for the array.
    let (_, _, sacct, _) = poll_group_locally(
        "40_[2-7%2]|PENDING|JobArrayTaskLimit|(null)|a\n40_1|RUNNING|None|n2|a\n",
        0,
        group(vec![0, 1], (0..8).collect()),
    )
    .await;
    assert_eq!(sacct.as_deref(), Some("40"));
    // A task listed as ended: sacct says how.
    let (_, _, sacct, _) = poll_group_locally(
        "40_0|COMPLETED|None|n1|a\n40_1|RUNNING|None|n2|a\n",
        0,
        group(vec![1], vec![0, 1]),
    )
    .await;
    assert_eq!(sacct.as_deref(), Some("40"));
}

#[tokio::test]
async fn a_poll_of_twenty_thousand_ids_travels_on_stdin_and_asks_squeue_once() {
    // 20,000 ids as one argument would be ~140 KB, above Linux's 128 KiB limit for one
    // argument: they travel on stdin. So many ids: squeue lists the user's own jobs
    // once (`--me`), and sacct gets the ones squeue does not list, 2000 per run.
    let all: Vec<u64> = (1_000_000..1_020_000).collect();
    let poll = poll_command(&[(None, jobs(&all, &[]))].into()).unwrap();
    assert!(
        poll.get_args().iter().all(|a| a.len() < 16 * 1024),
        "no argument carries the ids"
    );
    let (_, squeue, sacct, _) = poll_group_locally("", 0, jobs(&all, &[])).await;
    assert_eq!(
        squeue, "mine\n",
        "one squeue of the user's jobs, no id list"
    );
    let sacct = sacct.unwrap();
    assert_eq!(sacct.lines().count(), 10, "10 sacct runs of 2000 ids");
    assert!(sacct.lines().all(|c| c.split(',').count() == 2000));
    assert_eq!(
        sacct.lines().next().unwrap().split(',').next(),
        Some("1000000")
    );
    assert_eq!(sacct.lines().flat_map(|l| l.split(',')).count(), 20_000);
}

#[tokio::test]
async fn few_jobs_are_named_to_squeue_and_many_are_kept_from_the_users_own() {
    // Below MINE_FROM jobs: explicit lists.
    let few: Vec<u64> = (1..MINE_FROM as u64).collect();
    let (_, squeue, _, _) = poll_group_locally("", 0, jobs(&few, &[])).await;
    assert_eq!(squeue.lines().count(), 1);
    assert_eq!(squeue.trim().split(',').count(), few.len());
    // From MINE_FROM jobs: squeue lists the user's jobs; untracked rows are dropped
    // on the login node, and a tracked job it does not list goes to sacct.
    let many: Vec<u64> = (1..=MINE_FROM as u64).collect();
    let rows = format!(
        "1|PENDING|Priority|(null)|a\n5_[1-3]|PENDING|Priority|(null)|b\n9999|RUNNING|None|n1|other\n{}",
        (3..=MINE_FROM as u64)
            .map(|n| format!("{n}|RUNNING|None|n1|c\n"))
            .collect::<String>()
    );
    let (parts, squeue, sacct, _) = poll_group_locally(&rows, 0, jobs(&many, &[])).await;
    assert_eq!(squeue, "mine\n");
    let listed = parts[0].stdout_text();
    assert!(listed.contains("1|PENDING") && listed.contains("5_[1-3]|PENDING"));
    assert!(
        !listed.contains("9999"),
        "an untracked job is not sent back: {listed}"
    );
    assert_eq!(listed.lines().count(), MINE_FROM, "every tracked row kept");
    assert_eq!(
        sacct.as_deref(),
        Some("2"),
        "only the unlisted job needs sacct"
    );
}

#[test]
fn sacct_is_asked_for_failed_node_only_where_the_client_has_it() {
    use crate::slurm::parse::{SACCT_POLL_FORMAT, SACCT_POLL_FORMAT_WITH_FAILED_NODE};
    let formats = |failed_node: bool| {
        let group = Group {
            failed_node,
            ..jobs(&[7], &[])
        };
        let poll = poll_command(&[(None, group)].into()).unwrap();
        poll.get_args()
            .iter()
            .filter_map(|a| a.strip_prefix("--format=").map(str::to_string))
            .collect::<Vec<_>>()
    };
    assert!(formats(true).contains(&SACCT_POLL_FORMAT_WITH_FAILED_NODE.to_string()));
    assert!(formats(false).contains(&SACCT_POLL_FORMAT.to_string()));
    assert!(!formats(false).contains(&SACCT_POLL_FORMAT_WITH_FAILED_NODE.to_string()));
}

#[tokio::test]
async fn lists_of_several_clusters_reach_the_same_files_by_bash_and_by_awk() {
    // Two clusters, each with jobs, RUNNING keys and array tasks; one list empty.
    let mut first = jobs(&[11, 12, 13], &[12]);
    first.expected = vec![(SlurmJobId::new(13).unwrap(), Some(4))];
    let second = jobs(&[21, 22], &[]);
    let groups: BTreeMap<Option<String>, Group> =
        [(None, first), (Some("other".to_string()), second)].into();
    let tools = fake_tools("", 0);
    let mut lists = Vec::new();
    for bash_decides_up_to in [usize::MAX, 0] {
        let poll = poll_command_deciding(&groups, bash_decides_up_to).unwrap();
        let by = if bash_decides_up_to == 0 {
            "awk"
        } else {
            "bash"
        };
        // bash -c SCRIPT poll LIVE LISTS-BY ...
        assert_eq!(poll.get_args()[4], by);
        let (output, frame) = run_locally(&poll, tools.path()).await;
        assert!(output.success(), "{}", output.stderr_text());
        let files: BTreeMap<String, String> = std::fs::read_dir(frame.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(['J', 'R', 'E']))
            .map(|name| {
                let text = std::fs::read_to_string(frame.path().join(&name)).unwrap();
                (name, text)
            })
            .collect();
        lists.push(files);
    }
    let expected: BTreeMap<String, String> = [
        ("J.0", "11\n12\n13\n"),
        ("R.0", "12\n"),
        ("E.0", "13_4\n"),
        ("J.1", "21\n22\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(lists[0], expected, "bash's lists");
    assert_eq!(lists[1], expected, "awk's lists");
}

/// Runs `poll` locally as the long-lived shell runs a command: in a fresh frame folder
/// `f.N` of `shell`, the shell's private folder, which outlives its commands.
async fn run_in_shell(poll: &Command, bin: &std::path::Path, shell: &std::path::Path) -> Output {
    let n = std::fs::read_dir(shell).unwrap().count();
    let frame = shell.join(format!("f.{n}"));
    std::fs::create_dir(&frame).unwrap();
    run_in_frame(poll, bin, &frame, Some(shell)).await
}

/// squeue's rows of jobs `all`, every one PENDING but `running`.
fn rows_of(all: &[u64], running: &[u64]) -> String {
    all.iter()
        .map(|n| match running.contains(n) {
            true => format!("{n}|RUNNING|None|n1|job\n"),
            false => format!("{n}|PENDING|Priority|(null)|job\n"),
        })
        .collect()
}

#[tokio::test]
async fn a_repeated_poll_whose_rows_did_not_change_answers_same_and_nothing_else() {
    use super::request::poll_request;
    use crate::slurm::context::poll_memo::{take_answer, MemoAnswer, Slot};
    let all: Vec<u64> = (1..=MINE_FROM as u64).collect();
    let last = *all.last().unwrap();
    let tools = fake_tools(&rows_of(&all, &[]), 0);
    let bin = tools.path();
    let shell = tempfile::tempdir().unwrap();
    let request = poll_request(&[(None, jobs(&all, &[]))].into()).unwrap();
    assert!(request.memo_able, "a poll asking for the user's own jobs");
    // A request holding a slot brings no lists, as the client sends it.
    let poll = |memo: &str| match memo.starts_with('-') {
        true => request.command(Some(format!("c0ffee:{memo}"))),
        false => request.command_again(format!("c0ffee:{memo}")),
    };
    let squeues = || std::fs::read_to_string(bin.join("squeue.jobs")).unwrap_or_default();

    // Nothing held: a full answer, squeue's rows kept in slot a.
    let mut first = run_in_shell(&poll("-:a"), bin, shell.path()).await;
    assert_eq!(take_answer(&mut first).unwrap(), MemoAnswer::Kept(Slot::A));
    let parts = round_trip::split(&first, 2).unwrap();
    assert_eq!(parts[0].stdout_text().lines().count(), all.len());

    // Holding a, the same rows: the answer is `same` alone, and sacct is not run.
    let same = run_in_shell(&poll("a:b"), bin, shell.path()).await;
    assert_eq!(
        same.stdout_text(),
        "@@memo same\n",
        "{}",
        same.stderr_text()
    );
    assert_eq!(squeues(), "mine\nmine\n", "squeue is asked each time");

    // One job started: a full answer with its new row, kept in b.
    std::fs::write(bin.join("squeue.out"), rows_of(&all, &[last])).unwrap();
    let mut changed = run_in_shell(&poll("a:b"), bin, shell.path()).await;
    assert_eq!(
        take_answer(&mut changed).unwrap(),
        MemoAnswer::Kept(Slot::B)
    );
    let parts = round_trip::split(&changed, 2).unwrap();
    assert!(parts[0].stdout_text().contains(&format!("{last}|RUNNING")));
    // Had that answer been lost, the client would still hold a: a is as it was, so
    // the rows differ from it.
    let mut stale = run_in_shell(&poll("a:b"), bin, shell.path()).await;
    assert_eq!(take_answer(&mut stale).unwrap(), MemoAnswer::Kept(Slot::B));
    // Holding b, nothing new: `same`.
    let same = run_in_shell(&poll("b:a"), bin, shell.path()).await;
    assert_eq!(same.stdout_text(), "@@memo same\n");

    // Another client's slots and lists are its own: nothing of c0ffee's answers for it.
    let other = request.command_again("beef:a:b".to_string());
    let mut other = run_in_shell(&other, bin, shell.path()).await;
    assert_eq!(take_answer(&mut other).unwrap(), MemoAnswer::Lost);
    // Neither does a new shell's folder, nor lists kept of another request.
    let new_shell = tempfile::tempdir().unwrap();
    let mut lost = run_in_shell(&poll("a:b"), bin, new_shell.path()).await;
    assert_eq!(take_answer(&mut lost).unwrap(), MemoAnswer::Lost);
    let fewer = poll_request(&[(None, jobs(&all[1..], &[]))].into()).unwrap();
    let mut lost = run_in_shell(&fewer.command_again("c0ffee:b:a".into()), bin, shell.path()).await;
    assert_eq!(take_answer(&mut lost).unwrap(), MemoAnswer::Lost);

    // A tracked job squeue no longer lists goes to sacct: the poll is not quiet and
    // nothing is kept; `same` is never answered while a job needs sacct.
    assert!(!std::fs::read_to_string(bin.join("sacct.jobs")).is_ok_and(|s| !s.is_empty()));
    std::fs::write(bin.join("squeue.out"), rows_of(&all[1..], &[last])).unwrap();
    let mut gone = run_in_shell(&poll("b:a"), bin, shell.path()).await;
    assert_eq!(take_answer(&mut gone).unwrap(), MemoAnswer::Nothing);
    let parts = round_trip::split(&gone, 2).unwrap();
    assert!(parts[1].success());
    assert_eq!(
        std::fs::read_to_string(bin.join("sacct.jobs"))
            .unwrap()
            .trim(),
        "1"
    );
    // squeue failing: nothing kept either.
    std::fs::write(bin.join("squeue"), "#!/bin/bash\necho down >&2\nexit 1\n").unwrap();
    let mut failed = run_in_shell(&poll("-:a"), bin, shell.path()).await;
    assert_eq!(take_answer(&mut failed).unwrap(), MemoAnswer::Nothing);
    let parts = round_trip::split(&failed, 2).unwrap();
    assert_eq!(parts[0].status, 1);
    assert_eq!(parts[0].stderr_text().trim(), "down");
}

#[tokio::test]
async fn a_memo_is_kept_only_in_the_shells_private_folder_and_for_the_users_own_jobs() {
    use super::request::poll_request;
    use crate::slurm::context::poll_memo::{take_answer, MemoAnswer};
    let all: Vec<u64> = (1..=MINE_FROM as u64).collect();
    let tools = fake_tools(&rows_of(&all, &[]), 0);
    // A frame folder but no folder to keep in (a shell that gives none): nothing is
    // kept, a poll with its lists answers in full, and one holding a slot is told the
    // lists are lost.
    let request = poll_request(&[(None, jobs(&all, &[]))].into()).unwrap();
    let (mut output, _frame) =
        run_locally(&request.command(Some("c0ffee:-:a".into())), tools.path()).await;
    assert_eq!(take_answer(&mut output).unwrap(), MemoAnswer::Nothing);
    assert_eq!(round_trip::split(&output, 2).unwrap().len(), 2);
    let (mut output, _frame) =
        run_locally(&request.command_again("c0ffee:a:b".into()), tools.path()).await;
    assert_eq!(take_answer(&mut output).unwrap(), MemoAnswer::Lost);
    // A few jobs, named to squeue: no memo, even when asked.
    let shell = tempfile::tempdir().unwrap();
    let few = poll_request(&[(None, jobs(&all[..3], &[]))].into()).unwrap();
    assert!(!few.memo_able);
    let answer_of = |poll: Command| {
        let (bin, shell) = (tools.path().to_path_buf(), shell.path().to_path_buf());
        async move { take_answer(&mut run_in_shell(&poll, &bin, &shell).await).unwrap() }
    };
    let asked = few.command(Some("c0ffee:-:a".into()));
    assert_eq!(answer_of(asked).await, MemoAnswer::Nothing);
    let again = few.command_again("c0ffee:a:b".into());
    assert_eq!(answer_of(again).await, MemoAnswer::Lost);
    // A memo word that could name another file is refused: nothing kept.
    let odd = request.command(Some("../x:-:a".to_string()));
    assert_eq!(answer_of(odd).await, MemoAnswer::Nothing);
}
