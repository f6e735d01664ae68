//! A multi-role job in a poll: one SLURM job (a heterogeneous job whose leader `123+0`
//! stands for it), one state per role. While it lives every role takes the job's state
//! and its component's nodes (`123+N`); when it ends, the exit statuses its batch
//! script wrote (`roles/<role>.exit`, and `roles/first-failure`) say how each role
//! ended: 0 is COMPLETE, the first to fail is ERROR (the job's class), the ones it
//! stopped CANCELED.

use std::collections::BTreeMap;

use crate::classify::ErrorClass;
use crate::record::{JobRecord, Mark, TaskMark, Usage};
use crate::slurm::parse::expand_nodelist;
use crate::slurm::paths::roles_dir;
use crate::slurm::poll::usage::{GpusAsked, RolePlace, RunParts};
use crate::state::JobState;
use crate::transport::{Command, Output};
use crate::Result;

/// The file naming the first role to fail, in the roles folder.
const FIRST_FAILURE: &str = "first-failure";

/// What the batch script of a multi-role job wrote of its roles' ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RoleEnds {
    /// Each ended role's exit status.
    pub(super) exits: BTreeMap<String, i32>,
    /// The first role to fail.
    pub(super) first_failure: Option<String>,
    /// Each role's hosts as its run had them (`<role>.hosts`).
    pub(super) hosts: BTreeMap<String, Vec<String>>,
}

/// The command reading every file of `record`'s roles folder, one `PATH:LINE` each
/// (nothing when the folder is not there yet).
pub(super) fn role_ends_command(record: &JobRecord) -> Result<Command> {
    let dir = roles_dir(record)?;
    Ok(Command::new("grep")
        .args(["-r", "-H", "-s", "-e", "", "--"])
        .arg(dir.as_str()))
}

/// Read what [`role_ends_command`] printed.
pub(super) fn read_role_ends(part: &Output) -> RoleEnds {
    let mut ends = RoleEnds::default();
    for line in part.stdout_text().lines() {
        let Some((path, value)) = line.rsplit_once(':') else {
            continue;
        };
        let file = path.rsplit('/').next().unwrap_or_default();
        let value = value.trim();
        if file == FIRST_FAILURE {
            ends.first_failure = Some(value.to_string()).filter(|v| !v.is_empty());
        } else if let Some(role) = file.strip_suffix(".hosts") {
            let hosts: Vec<String> = value
                .split(',')
                .filter(|h| !h.is_empty())
                .map(str::to_string)
                .collect();
            if !hosts.is_empty() {
                ends.hosts.insert(role.to_string(), hosts);
            }
        } else if let Some(role) = file.strip_suffix(".exit") {
            if let Ok(code) = value.parse() {
                ends.exits.insert(role.to_string(), code);
            }
        }
    }
    ends
}

/// Where each role of `record` runs: the roles of their own nodes on the components in
/// name order (a job with one such role is its component 0), a role `on` another on that
/// role's component.
pub(super) fn role_places(record: &JobRecord) -> BTreeMap<String, RolePlace> {
    let Some(spec) = record.spec.as_ref() else {
        return BTreeMap::new();
    };
    let mut places: BTreeMap<String, RolePlace> = spec
        .roles
        .iter()
        .filter(|(_, r)| r.on.is_none())
        .enumerate()
        .map(|(index, (name, _))| (name.clone(), RolePlace::Own(index as u32)))
        .collect();
    for (name, role) in &spec.roles {
        if let Some(host) = &role.on {
            if let Some(RolePlace::Own(component)) = places.get(host).cloned() {
                let host = host.clone();
                places.insert(name.clone(), RolePlace::Beside { host, component });
            }
        }
    }
    places
}

/// The nodes of each role placed at `places`: a role of its own nodes those of its
/// component, a role `on` another that role's first node.
fn role_nodes(
    places: &BTreeMap<String, RolePlace>,
    components: &[(u32, String)],
) -> BTreeMap<String, Vec<String>> {
    let nodes_of = |index: u32| {
        components
            .iter()
            .find(|(component, _)| *component == index)
            .and_then(|(_, list)| expand_nodelist(list).ok())
            .unwrap_or_default()
    };
    places
        .iter()
        .map(|(name, place)| {
            let nodes = match place {
                RolePlace::Own(index) => nodes_of(*index),
                RolePlace::Beside { component, .. } => {
                    nodes_of(*component).into_iter().take(1).collect()
                }
            };
            (name.clone(), nodes)
        })
        .collect()
}

/// What a poll saw of a multi-role job's components.
#[derive(Debug, Clone, Copy)]
pub(super) struct RolesSeen<'a> {
    /// Each component's node list (`(1, "n2")`).
    pub(super) components: &'a [(u32, String)],
    /// Whether they are the run's nodes (a running job's, or accounting's); otherwise
    /// (an ending job's squeue rows list only the nodes still completing) they only
    /// fill roles that have none yet.
    pub(super) known: bool,
    /// What each run used by part, from accounting (empty: not told).
    pub(super) runs: &'a [RunParts],
}

/// The mark of multi-role `record` from the job's decided `mark`, the components' node
/// lists and (once it ended) its roles' ends; `None` when nothing changes.
pub(super) fn roles_mark(
    record: &JobRecord,
    mark: Mark,
    seen: RolesSeen<'_>,
    ends: Option<&RoleEnds>,
) -> Option<Mark> {
    let places = role_places(record);
    let nodes = role_nodes(&places, seen.components);
    let state = mark.state;
    let ends = ends.cloned().unwrap_or_default();
    // A cancelled job's roles were stopped by the cancel, whichever step noticed first.
    let failed = ends
        .first_failure
        .clone()
        .filter(|_| state != JobState::Canceled);
    // What the roles ask, resolved once, when accounting told what their runs used.
    let asked = (state.is_terminal() && !seen.runs.is_empty()).then(|| GpusAsked::of(record));
    let mut roles = BTreeMap::new();
    for (name, current) in &record.roles {
        if current.state.is_terminal() {
            continue;
        }
        let mut role = TaskMark::new(state);
        // The hosts the run wrote win; then the poll's lists (see `RolesSeen`).
        role.nodes = match ends.hosts.get(name) {
            Some(hosts) => Some(hosts.clone()).filter(|h| *h != current.nodes),
            None => nodes
                .get(name)
                .filter(|n| !n.is_empty() && **n != current.nodes)
                .filter(|_| seen.known || current.nodes.is_empty())
                .cloned(),
        };
        if state.is_terminal() {
            role_end(&mut role, name, &ends, &failed, &mark);
            role.usage = asked
                .as_ref()
                .zip(places.get(name))
                .and_then(|(asked, place)| {
                    let asks = asked.asks(Some(name));
                    let runs: Vec<Usage> = seen
                        .runs
                        .iter()
                        .filter_map(|run| run.role_usage(name, place, asks))
                        .collect();
                    Usage::sum(&runs)
                });
        } else if role.state == current.state
            && role.nodes.as_ref().is_none_or(|n| n == &current.nodes)
        {
            continue;
        }
        roles.insert(name.clone(), role);
    }
    if roles.is_empty() {
        return None;
    }
    let message = match (&failed, state.is_terminal()) {
        (Some(role), true) => {
            let code = ends
                .exits
                .get(role)
                .map_or_else(String::new, |c| format!(" (exit {c})"));
            let rest = mark.message.clone().unwrap_or_default();
            Some(format!("role {role} failed first{code}; {rest}"))
        }
        _ => mark.message.clone(),
    };
    let mut out = Mark::new(state, mark.source);
    out.message = message;
    out.times = mark.times;
    out.usage = mark.usage;
    out.roles = roles;
    Some(out)
}

/// How role `name` of a job that ends with `mark` ended, in `role`: by its exit in
/// `ends`, or the role that `failed` first, or as the job did.
fn role_end(
    role: &mut TaskMark,
    name: &str,
    ends: &RoleEnds,
    failed: &Option<String>,
    mark: &Mark,
) {
    match ends.exits.get(name) {
        Some(0) => {
            role.state = JobState::Complete;
            role.message = Some("exit 0".to_string());
        }
        _ if failed.as_deref() == Some(name) => {
            role.state = JobState::Error;
            role.err_class = Some(mark.err_class.unwrap_or(ErrorClass::Program));
            role.node_fault = mark.node_fault;
            role.message = Some(match ends.exits.get(name) {
                Some(code) => format!("failed first: exit {code}"),
                None => "failed first".to_string(),
            });
        }
        _ if failed.is_some() => {
            role.state = JobState::Canceled;
            role.message = Some(format!(
                "stopped: role {} failed",
                failed.as_deref().unwrap_or_default()
            ));
        }
        _ => {
            role.err_class = mark.err_class.filter(|_| mark.state == JobState::Error);
            role.node_fault = mark.node_fault;
            role.message = mark.message.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{JobId, TransitionSource};
    use crate::spec::JobSpec;
    use crate::storage::RemotePath;

    fn record() -> JobRecord {
        let spec = JobSpec::from_yaml_str(
            "name: rl\nroles:\n  server: {command: s}\n  client: {command: c}\n  watch: {command: w, on: server}\n",
        )
        .unwrap();
        JobRecord::new(
            JobId::parse("rl-00aa11").unwrap(),
            &spec,
            RemotePath::parse_for("results_dir", "/results/rl-00aa11").unwrap(),
        )
        .unwrap()
    }

    fn known(components: &[(u32, String)]) -> RolesSeen<'_> {
        RolesSeen {
            components,
            known: true,
            runs: &[],
        }
    }

    #[test]
    fn an_ending_jobs_partial_node_list_fills_only_roles_without_nodes() {
        let mut record = record();
        let pending = Mark::new(JobState::Pending, TransitionSource::Poll);
        let completing = [(0, "n2".to_string())];
        let seen = RolesSeen {
            components: &completing,
            known: false,
            runs: &[],
        };
        let marked = roles_mark(&record, pending, seen, None).unwrap();
        record.apply_mark(marked, None).unwrap();
        assert_eq!(record.roles["client"].nodes, ["n2"]);
        // Accounting's list of the run replaces it; a partial one does not.
        let done = Mark::new(JobState::Complete, TransitionSource::Poll);
        let run = [(0, "n[2-3]".to_string())];
        let marked = roles_mark(&record, done.clone(), known(&run), None).unwrap();
        assert_eq!(
            marked.roles["client"].nodes.as_deref(),
            Some(&["n2".to_string(), "n3".to_string()][..])
        );
        let partial = RolesSeen {
            components: &completing,
            known: false,
            runs: &[],
        };
        let mut record2 = record.clone();
        record2.roles.get_mut("client").unwrap().nodes = vec!["n2".into(), "n3".into()];
        let marked = roles_mark(&record2, done, partial, None).unwrap();
        assert_eq!(marked.roles["client"].nodes, None);
    }

    fn output(stdout: &str) -> Output {
        Output {
            status: 0,
            stdout: stdout.as_bytes().to_vec(),
            stderr: Vec::new(),
        }
    }

    #[test]
    fn the_roles_files_are_read() {
        let ends = read_role_ends(&output(
            "/r/roles/server.exit:3\n/r/roles/client.exit:0\n/r/roles/first-failure:server\n/r/roles/x.exit.tmp:1\n/r/roles/server.hosts:n1,n2\n",
        ));
        assert_eq!(ends.first_failure.as_deref(), Some("server"));
        assert_eq!(
            ends.exits,
            BTreeMap::from([("server".into(), 3), ("client".into(), 0)])
        );
        assert_eq!(read_role_ends(&output("")), RoleEnds::default());
    }

    #[test]
    fn a_live_job_gives_each_role_its_components_nodes() {
        let record = record();
        let mark = Mark::new(JobState::Running, TransitionSource::Poll);
        // Components in name order of the roles of their own nodes: client 0, server 1.
        let components = [(0, "n2".to_string()), (1, "n1".to_string())];
        let marked = roles_mark(&record, mark, known(&components), None).unwrap();
        let nodes = |role: &str| marked.roles[role].nodes.clone().unwrap();
        assert_eq!(nodes("client"), ["n2"]);
        assert_eq!(nodes("server"), ["n1"]);
        assert_eq!(
            nodes("watch"),
            ["n1"],
            "beside the server, on its first node"
        );
        assert!(marked.roles.values().all(|r| r.state == JobState::Running));
    }

    #[test]
    fn the_first_failure_is_error_and_the_others_stopped() {
        let record = record();
        let mark = Mark::new(JobState::Error, TransitionSource::Poll)
            .err_class(ErrorClass::Program)
            .message("FAILED, exit code 3");
        let ends = RoleEnds {
            exits: BTreeMap::from([("server".into(), 3), ("watch".into(), 0)]),
            first_failure: Some("server".into()),
            ..RoleEnds::default()
        };
        let marked = roles_mark(&record, mark, known(&[]), Some(&ends)).unwrap();
        let message = marked.message.clone().unwrap();
        assert_eq!(marked.roles["server"].state, JobState::Error);
        assert_eq!(marked.roles["server"].err_class, Some(ErrorClass::Program));
        assert_eq!(marked.roles["client"].state, JobState::Canceled);
        assert_eq!(marked.roles["watch"].state, JobState::Complete);
        assert!(
            message.starts_with("role server failed first (exit 3)"),
            "{message}"
        );
        let mut record = record;
        record.apply_mark(marked, None).unwrap();
        assert_eq!(record.state, JobState::Error);
        assert_eq!(record.err_class, Some(ErrorClass::Program));
        assert!(
            record.last_message().contains("failed: server"),
            "{}",
            record.last_message()
        );
    }

    #[test]
    fn a_role_failing_on_its_node_keeps_only_its_nodes_from_the_retry() {
        let mut record = record();
        let running = Mark::new(JobState::Running, TransitionSource::Poll);
        let components = [(0, "n2".to_string()), (1, "n1".to_string())];
        record
            .apply_mark(
                roles_mark(&record, running, known(&components), None).unwrap(),
                None,
            )
            .unwrap();
        let mut failed = Mark::new(JobState::Error, TransitionSource::Poll)
            .err_class(ErrorClass::Infra)
            .message("FAILED: Xid 79");
        failed.node_fault = true;
        let ends = RoleEnds {
            exits: BTreeMap::from([("server".into(), 1)]),
            first_failure: Some("server".into()),
            ..RoleEnds::default()
        };
        let marked = roles_mark(&record, failed, known(&components), Some(&ends)).unwrap();
        record.apply_mark(marked, None).unwrap();
        assert_eq!(record.err_class, Some(ErrorClass::Infra), "a retry is due");
        assert_eq!(record.nodes_to_exclude(), ["n1"], "the server's node alone");
    }

    #[test]
    fn a_cancelled_job_cancels_every_role_not_ended() {
        let record = record();
        let mark = Mark::new(JobState::Canceled, TransitionSource::Poll);
        // The cancel killed the server's step first: that is no failure of its own.
        let ends = RoleEnds {
            exits: BTreeMap::from([("watch".into(), 0), ("server".into(), 1)]),
            first_failure: Some("server".into()),
            ..RoleEnds::default()
        };
        let marked = roles_mark(&record, mark, known(&[]), Some(&ends)).unwrap();
        assert_eq!(marked.roles["server"].state, JobState::Canceled);
        assert_eq!(marked.roles["client"].state, JobState::Canceled);
        assert_eq!(marked.roles["watch"].state, JobState::Complete);
    }
}
