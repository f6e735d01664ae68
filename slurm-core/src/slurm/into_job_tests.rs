//! The node a forward or an exec reaches, and the step an exec runs.
use super::commands::{srun_beside, StepContainer};
use super::node_choice::{choose_node, NodeChoice};
use super::parse::SlurmJobId;
use crate::record::JobRecord;
use crate::spec::JobSpec;
use crate::state::JobState;

fn record(state: JobState, nodes: &[&str]) -> JobRecord {
    let mut record = super::testkit::record_of(&JobSpec::new("reach", "sleep 1"));
    record.state = state;
    record.nodes = nodes.iter().map(|n| n.to_string()).collect();
    record
}

#[test]
fn the_first_node_by_default_and_any_node_by_its_index() {
    let running = record(JobState::Running, &["n1", "n2"]);
    assert_eq!(choose_node(&running, &NodeChoice::First).unwrap(), "n1");
    assert_eq!(choose_node(&running, &NodeChoice::Index(1)).unwrap(), "n2");
    let err = choose_node(&running, &NodeChoice::Index(2)).unwrap_err();
    assert!(
        err.to_string()
            .contains("runs on 2 node(s) (n1,n2); --node counts from 0 to 1"),
        "{err}"
    );
}

#[test]
fn a_job_not_running_a_task_of_no_array_and_a_role_are_refused_naming_the_fix() {
    let pending = record(JobState::Pending, &[]);
    let err = choose_node(&pending, &NodeChoice::First).unwrap_err();
    assert!(
        err.to_string().contains("PENDING, not RUNNING")
            && err.to_string().contains("slurmctl watch"),
        "{err}"
    );
    let ended = record(JobState::Complete, &["n1"]);
    assert!(choose_node(&ended, &NodeChoice::First)
        .unwrap_err()
        .to_string()
        .contains("it has ended"));
    let running = record(JobState::Running, &["n1"]);
    let err = choose_node(&running, &NodeChoice::Task(3)).unwrap_err();
    assert!(err.to_string().contains("not an array"), "{err}");
    let err = choose_node(&running, &NodeChoice::Role("trainer".into())).unwrap_err();
    assert!(
        err.to_string().contains("has no roles") && err.to_string().contains("--node N"),
        "{err}"
    );
    let unnamed = record(JobState::Running, &[]);
    assert!(choose_node(&unnamed, &NodeChoice::First)
        .unwrap_err()
        .to_string()
        .contains("not named the nodes"));
}

#[test]
fn an_exec_step_overlaps_the_job_and_keeps_each_argument_whole() {
    let argv: Vec<String> = ["sh", "-c", "echo \"$1\"; exit 3", "sh", "it's; $(rm -rf /)"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let id = SlurmJobId::parse("812").unwrap();
    let plain = srun_beside(id, None, "n1", None, "/r/job", &argv).unwrap();
    assert_eq!(
        plain.get_args()[..8],
        [
            "--jobid=812",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            "--nodelist=n1",
            "--quiet",
            "--chdir=/r/job",
            "--"
        ]
    );
    let line = plain.shell_line().unwrap();
    // Through a real shell, the arguments arrive as given.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "printf '%s\\n' {}",
            line.split_once(" -- ").unwrap().1
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .collect::<Vec<_>>(),
        argv
    );
    let container = StepContainer {
        image: "/img/a.sqsh".into(),
        mounts: vec!["/r/job:/r/job".into(), "/code/t:/code/t:ro".into()],
        workdir: "/r/job".into(),
    };
    let boxed = srun_beside(id, Some("c2"), "n2", Some(&container), "/r/job", &argv).unwrap();
    let args = boxed.get_args();
    assert_eq!(args[0], "--clusters=c2");
    assert!(args.contains(&"--container-image=/img/a.sqsh".to_string()));
    assert!(args.contains(&"--container-mounts=/r/job:/r/job,/code/t:/code/t:ro".to_string()));
    assert!(args.contains(&"--container-workdir=/r/job".to_string()));
    assert!(!args.iter().any(|a| a.starts_with("--chdir")));
    assert!(
        srun_beside(id, None, "n1;reboot", None, "/r", &argv).is_err(),
        "a node name is checked"
    );
}

#[test]
fn an_arrays_task_is_reached_on_its_own_first_node() {
    let mut array =
        super::testkit::record_of(&JobSpec::new("sweep", "sleep 1")).with_tasks([0, 1, 2]);
    array.state = JobState::Running;
    for (index, state, nodes) in [
        (0, JobState::Complete, vec!["n1"]),
        (1, JobState::Running, vec!["n2"]),
        (2, JobState::Pending, vec![]),
    ] {
        let task = array.tasks.get_mut(&index).unwrap();
        task.state = state;
        task.nodes = nodes.into_iter().map(str::to_string).collect();
    }
    assert_eq!(choose_node(&array, &NodeChoice::Task(1)).unwrap(), "n2");
    // The array's first running task stands for the array.
    assert_eq!(choose_node(&array, &NodeChoice::First).unwrap(), "n2");
    let err = choose_node(&array, &NodeChoice::Task(2)).unwrap_err();
    assert!(
        err.to_string().contains("task 2 of job") && err.to_string().contains("PENDING"),
        "{err}"
    );
    assert!(choose_node(&array, &NodeChoice::Task(9))
        .unwrap_err()
        .to_string()
        .contains("has no task 9"));
}
