//! The argv of every scheduler command the SLURM backend runs outside its scripts, built
//! from typed arguments in one place (the scripts are in [`scripts`](super::scripts)).

#[cfg(any(test, feature = "testing"))]
use super::parse::SACCT_FORMAT;
use super::parse::{
    SlurmJobId, SACCT_POLL_FORMAT, SACCT_POLL_FORMAT_WITH_FAILED_NODE, SQUEUE_FORMAT,
};
use crate::names::validate_safe_name;
use crate::transport::Command;
use crate::Result;

/// The `--jobs=` value for `ids`; refuses an empty list (squeue and sacct would then
/// list every job).
fn jobs_arg(ids: &[SlurmJobId]) -> Result<String> {
    if ids.is_empty() {
        return Err(crate::Error::invalid(
            "slurm job ids",
            "give at least one SLURM job id (an empty list would query every job)",
        ));
    }
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    Ok(format!("--jobs={}", list.join(",")))
}

/// The `--clusters=` argument for a cluster name, validated.
fn cluster_arg(cluster: &str) -> Result<String> {
    validate_safe_name("cluster", cluster)?;
    Ok(format!("--clusters={cluster}"))
}

/// squeue listing `ids` in every state, no header, in [`SQUEUE_FORMAT`], optionally on
/// one cluster of a federation: what a cancel reads right after its `scancel`, and the
/// bare query benches compare against (the poll script adds the ids itself, see
/// [`squeue_rows`]).
pub(crate) fn squeue_jobs(ids: &[SlurmJobId], cluster: Option<&str>) -> Result<Command> {
    let mut command = Command::new("squeue").args([
        "--noheader".to_string(),
        "--states=all".to_string(),
        jobs_arg(ids)?,
        format!("--format={SQUEUE_FORMAT}"),
    ]);
    if let Some(cluster) = cluster {
        command = command.arg(cluster_arg(cluster)?);
    }
    Ok(command)
}

/// squeue in every state, no header, in [`SQUEUE_FORMAT`], optionally on one cluster of
/// a federation; without `--jobs=` (the poll script adds the ids, in chunks).
pub(crate) fn squeue_rows(cluster: Option<&str>) -> Result<Command> {
    let mut command = Command::new("squeue").args([
        "--noheader".to_string(),
        "--states=all".to_string(),
        format!("--format={SQUEUE_FORMAT}"),
    ]);
    if let Some(cluster) = cluster {
        command = command.arg(cluster_arg(cluster)?);
    }
    Ok(command)
}

/// sacct of every job row and step, every duplicate row of a requeued job
/// (`--duplicates`), `--parsable2` in [`SACCT_POLL_FORMAT`], or with `failed_node` in
/// [`SACCT_POLL_FORMAT_WITH_FAILED_NODE`] (a client of Slurm 23.02 or newer); without
/// `--jobs=` (the poll script adds the ids squeue could not settle).
pub(crate) fn sacct_rows(cluster: Option<&str>, failed_node: bool) -> Result<Command> {
    let format = match failed_node {
        true => SACCT_POLL_FORMAT_WITH_FAILED_NODE,
        false => SACCT_POLL_FORMAT,
    };
    sacct_in(cluster, format)
}

/// sacct in `format` (see [`sacct_rows`]).
fn sacct_in(cluster: Option<&str>, format: &str) -> Result<Command> {
    let mut command = Command::new("sacct").args([
        "--noheader".to_string(),
        "--parsable2".to_string(),
        "--duplicates".to_string(),
        format!("--format={format}"),
    ]);
    if let Some(cluster) = cluster {
        command = command.arg(cluster_arg(cluster)?);
    }
    Ok(command)
}

/// [`sacct_rows`] of `ids`.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn sacct_jobs(ids: &[SlurmJobId], cluster: Option<&str>) -> Result<Command> {
    Ok(sacct_in(cluster, SACCT_FORMAT)?.arg(jobs_arg(ids)?))
}

/// `scontrol show job` of one job, one line per job.
pub(crate) fn scontrol_show_job(id: SlurmJobId, cluster: Option<&str>) -> Command {
    let mut command = Command::new("scontrol");
    if let Some(cluster) = cluster {
        command = command.arg("-M").arg(cluster);
    }
    command
        .args(["--oneliner", "show", "job"])
        .arg(id.to_string())
}

/// Point a pending job's dependency at `value` (`afterok:12:13`; empty clears it).
pub(crate) fn scontrol_update_dependency(
    id: SlurmJobId,
    cluster: Option<&str>,
    value: &str,
) -> Command {
    let mut command = Command::new("scontrol");
    if let Some(cluster) = cluster {
        command = command.arg("-M").arg(cluster);
    }
    command
        .arg("update")
        .arg(format!("JobId={id}"))
        .arg(format!("Dependency={value}"))
}

/// Cancel the tasks `tasks` (`0-3,8`) of the array job `id`: `scancel 123_[0-3,8]`.
pub(crate) fn scancel_tasks(id: SlurmJobId, tasks: &str, cluster: Option<&str>) -> Command {
    let mut command = Command::new("scancel");
    if let Some(cluster) = cluster {
        command = command.arg("-M").arg(cluster);
    }
    command.arg(format!("{id}_[{tasks}]"))
}

/// `scontrol show partition` of one partition, on one line.
pub(crate) fn scontrol_show_partition(partition: &str) -> Command {
    Command::new("scontrol")
        .args(["--oneliner", "show", "partition"])
        .arg(partition)
}

/// Cancel one job.
pub(crate) fn scancel(id: SlurmJobId, cluster: Option<&str>) -> Command {
    let mut command = Command::new("scancel");
    if let Some(cluster) = cluster {
        command = command.arg("-M").arg(cluster);
    }
    command.arg(id.to_string())
}

/// Cancel the jobs `ids` (not empty) with one `scancel`.
pub(crate) fn scancel_all(ids: &[SlurmJobId], cluster: Option<&str>) -> Command {
    let mut command = Command::new("scancel");
    if let Some(cluster) = cluster {
        command = command.arg("-M").arg(cluster);
    }
    command.args(ids.iter().map(ToString::to_string))
}

/// Whether accounting answers: an empty listing of the jobs started from now on.
pub(crate) fn sacct_answers() -> Command {
    Command::new("sacct").args(["--noheader", "-X", "--starttime=now", "--format=JobID"])
}

/// srun's options; they list `--container-image` when Pyxis is installed.
pub(crate) fn srun_help() -> Command {
    Command::new("srun").arg("--help")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> SlurmJobId {
        SlurmJobId::new(n).unwrap()
    }

    #[test]
    fn squeue_and_sacct_argv_are_fixed_and_refuse_empty_lists() {
        let ids = [id(12), id(13)];
        assert_eq!(
            squeue_jobs(&ids, None).unwrap().get_args(),
            [
                "--noheader",
                "--states=all",
                "--jobs=12,13",
                "--format=%i|%T|%r|%N|%j"
            ]
        );
        assert_eq!(
            squeue_jobs(&ids, Some("c1"))
                .unwrap()
                .get_args()
                .last()
                .unwrap(),
            "--clusters=c1"
        );
        assert!(squeue_jobs(&[], None).is_err());
        assert!(squeue_jobs(&ids, Some("c1;rm")).is_err());
        assert_eq!(
            sacct_jobs(&[id(5)], None).unwrap().get_args(),
            [
                "--noheader",
                "--parsable2",
                "--duplicates",
                "--format=JobID,JobIDRaw,State,ExitCode,Reason,Submit,Start,End,NodeList,JobName",
                "--jobs=5",
            ]
        );
        assert!(sacct_jobs(&[], None).is_err());
    }

    #[test]
    fn cluster_options_come_first_for_scontrol_and_scancel() {
        assert_eq!(
            scontrol_show_job(id(9), None).get_args(),
            ["--oneliner", "show", "job", "9"]
        );
        assert_eq!(
            scontrol_show_job(id(9), Some("c2")).get_args(),
            ["-M", "c2", "--oneliner", "show", "job", "9"]
        );
        assert_eq!(scancel(id(9), Some("c2")).get_args(), ["-M", "c2", "9"]);
    }
}

/// The job's container, for a step beside it: the image `--container-image` got, the
/// mounts and the working directory its own steps have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepContainer {
    pub(crate) image: String,
    pub(crate) mounts: Vec<String>,
    pub(crate) workdir: String,
}

/// One step beside running job `id` on `node`, overlapping its allocation (`srun
/// --jobid --overlap`): one task, in `container` when the job has one, else in the job
/// folder `job_dir`. `argv` follows `--` as arguments (quoted like every argument).
pub(crate) fn srun_beside(
    id: SlurmJobId,
    cluster: Option<&str>,
    node: &str,
    container: Option<&StepContainer>,
    job_dir: &str,
    argv: &[String],
) -> Result<Command> {
    validate_safe_name("node", node)?;
    let mut command = Command::new("srun");
    if let Some(cluster) = cluster {
        command = command.arg(cluster_arg(cluster)?);
    }
    command = command.args([
        format!("--jobid={id}"),
        "--overlap".to_string(),
        "--nodes=1".to_string(),
        "--ntasks=1".to_string(),
        format!("--nodelist={node}"),
        "--quiet".to_string(),
    ]);
    command = match container {
        Some(c) => {
            let mut command = command.arg(format!("--container-image={}", c.image));
            if !c.mounts.is_empty() {
                command = command.arg(format!("--container-mounts={}", c.mounts.join(",")));
            }
            command.arg(format!("--container-workdir={}", c.workdir))
        }
        None => command.arg(format!("--chdir={job_dir}")),
    };
    Ok(command.arg("--").args(argv.iter().cloned()))
}
