//! Fixed scripts in the long-lived shell: defined once per shell as a function, run in a
//! subshell of their own, and still apart from the shell and from each other.

use super::tests::{ends_soon, pid_alive, started, Bash};
use super::*;
use slurm_core::Script;

/// A script that shows what it sees: its parameters, a variable an earlier run set,
/// the protocol's own variable names, whether it runs in a subshell, its pid, and the
/// marker its children get; then exits with `$1`.
const SHOW: Script = Script::new(
    "show",
    r#"printf 'n=%s\n' "$#"
for a in "$@"; do printf 'arg=%s\n' "$a"; done
printf 'leak=%s\n' "${leak-unset}"
leak=set
printf 'protocol=%s\n' "${m-}${n-}${ok-}${src-}${s-}${p-}${o-}${e-}${t-}${f-}"
printf 'subshell=%s\n' "$BASH_SUBSHELL"
printf 'pid=%s\n' "$BASHPID"
printf 'marked=%s\n' "$(env | grep -c '^__SR_JOB=SRM')"
exit "$1"
"#,
);

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn value(out: &Output, key: &str) -> String {
    lines(out)
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {key} in {:?}", lines(out)))
}

/// Send `command`, return the request's bytes and the command's output.
fn send_and_finish(bash: &mut Bash, command: &Command) -> (String, Output) {
    bash.proto.send(command).unwrap();
    let request = String::from_utf8_lossy(bash.proto.to_write()).into_owned();
    let events = bash.pump_until(|e| matches!(e.last(), Some(ShellEvent::Finished(_))));
    match events.last() {
        Some(ShellEvent::Finished(out)) => (request, out.clone()),
        _ => unreachable!(),
    }
}

#[test]
fn a_fixed_script_is_defined_once_then_runs_as_a_function_in_a_subshell() {
    let mut bash = Bash::start();
    let first = SHOW.command(["3", "a b", "it's $(x) `y`", ""]);
    assert!(first.fixed_script().is_some());
    let (request, out) = send_and_finish(&mut bash, &first);
    assert!(
        request.contains("BASH_SUBSHELL"),
        "the first use sends the text"
    );
    assert_eq!(out.status, 3, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        lines(&out)[..5],
        ["n=4", "arg=3", "arg=a b", "arg=it's $(x) `y`", "arg="]
    );
    assert_eq!(value(&out, "leak"), "unset");
    assert_eq!(
        value(&out, "protocol"),
        "",
        "the shell's variables are apart"
    );
    assert_eq!(value(&out, "subshell"), "1", "a subshell, not a new bash");
    assert_eq!(value(&out, "marked"), "1", "children carry the marker");
    let first_pid = value(&out, "pid");
    assert_ne!(
        first_pid,
        bash.pid().to_string(),
        "its own pid, not the shell's"
    );

    let (request, out) = send_and_finish(&mut bash, &SHOW.command(["0", "x"]));
    assert!(
        !request.contains("BASH_SUBSHELL") && request.len() < 200,
        "a defined script is called by name: {request:?}"
    );
    assert_eq!(out.status, 0);
    assert_eq!(lines(&out)[..2], ["n=2", "arg=0"]);
    assert_eq!(
        value(&out, "leak"),
        "unset",
        "no run sees another's variables"
    );
    assert_ne!(value(&out, "pid"), first_pid, "each run its own subshell");
}

#[test]
fn an_edited_script_is_defined_anew() {
    let mut bash = Bash::start();
    let old = Script::new("edited", "echo old\n");
    let new = Script::new("edited", "echo new\n");
    let none = Vec::<String>::new;
    assert_eq!(bash.run(&old.command(none())).stdout, b"old\n");
    assert_eq!(bash.run(&new.command(none())).stdout, b"new\n");
    assert_eq!(bash.run(&old.command(none())).stdout, b"old\n");
    assert_eq!(bash.proto.defined.len(), 2);
}

#[test]
fn a_refused_request_defines_nothing_the_client_counts_on() {
    // The trailer arrives spoilt: the shell refuses the request, so it defined nothing,
    // and the next use sends the text again.
    let mut bash = Bash::start();
    let command = Script::new("refused", "echo ran\n").command(Vec::<String>::new());
    bash.proto.send(&command).unwrap();
    let mut request = bash.proto.to_write().to_vec();
    let n = request.len();
    bash.proto.wrote(n);
    request[n - 2] ^= 1;
    bash.write_raw(&request);
    let events = bash.pump_until(|e| e.contains(&ShellEvent::Refused));
    assert_eq!(events, vec![ShellEvent::Refused]);
    assert!(bash.proto.defined.is_empty(), "nothing counted as defined");
    let (request, out) = send_and_finish(&mut bash, &command);
    assert!(request.contains("echo ran"), "the text is sent again");
    assert_eq!(out.stdout, b"ran\n");
    assert_eq!(bash.proto.defined.len(), 1);
}

#[test]
fn every_remote_script_defines_as_a_function_and_names_no_pid_or_zero() {
    let mut scripts = slurm_core::testing::scripts();
    scripts.extend(crate::testing::scripts());
    assert!(scripts.len() >= 12, "{} scripts", scripts.len());
    for (name, text) in scripts {
        let defined = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", "eval \"f() {\n$1\n}\""])
            .arg("define")
            .arg(&text)
            .output()
            .unwrap();
        assert!(
            defined.status.success(),
            "{name} does not define as a function: {}",
            String::from_utf8_lossy(&defined.stderr)
        );
        for word in ["$$", "${$}", "$0", "${0}"] {
            assert!(
                !text.contains(word),
                "{name} names {word}, which a subshell does not keep"
            );
        }
    }
}

#[test]
fn a_fixed_script_whose_report_was_lost_is_killed_with_its_subshell() {
    // The script loops in its own subshell (a fork: no marker in its environment) and
    // runs a child that carries the marker; its `P` line is never read. A later shell
    // kills the marked child's group, the subshell with it.
    let nap = format!("300.{}", rand::random::<u16>());
    let looping = Script::new("looping", "while :; do sleep \"$1\"; done\n");
    let mut bash = Bash::start();
    bash.proto.send(&looping.command([nap.clone()])).unwrap();
    bash.flush();
    let lost = bash.proto.running().expect("delivered: it may run");
    assert_eq!(lost.pgid, 0);
    let sleeper = started(&format!("^sleep {nap}$"));
    let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap();
    let subshell: u32 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(pid_alive(subshell));
    let _ = Bash::start_killing(std::slice::from_ref(&lost)).run(&Command::new("true"));
    assert!(ends_soon(sleeper), "the marked child still runs");
    assert!(ends_soon(subshell), "the script's subshell still loops");
}
