//! slurmctl: a command-line facade over the slurm-run `Backend`, for people and for scripts.
//!
//! ```text
//! slurmctl preflight [SPEC]          check that jobs (like SPEC) can run
//! slurmctl submit SPEC [--after ID[:ok|any|notok|start]]... [--probe auto|always|never]
//!                                    submit exactly once (after other jobs; with or
//!                                    without the NCCL probe first)
//! slurmctl submit SPEC --forecast    where and when it would start, per partition of
//!                                    its list (submits nothing; exit 2 when none can run it)
//! slurmctl status ID...              current state (one round trip for all ids)
//! slurmctl why ID...                 why jobs wait, when they start, what releases them
//! slurmctl watch ID...               follow jobs until each is terminal
//! slurmctl logs ID [--task N] [--tail N] [--err] [--follow]
//! slurmctl cancel ID... [--tasks 0-3,8]   cancel (a whole array, or some of its tasks)
//! slurmctl records [--state S]       the local job records (no remote call)
//! slurmctl render SPEC               the batch script a submit would write (secrets never shown)
//! slurmctl credentials install REGISTRY --user USER [--password-env VAR]
//!                                    enroot credentials for a private registry, once per
//!                                    cluster and user (the secret on stdin, or in VAR)
//! slurmctl credentials check REGISTRY   present (exit 0) or absent (exit 2)
//! slurmctl credentials remove REGISTRY
//! slurmctl forward ID --port REMOTE [--local LOCAL] [--node N | --task N | --role NAME]
//!                                    a local port to a port of a running job's node,
//!                                    until interrupted (exit 130) or the job ends (exit 0)
//! slurmctl exec ID [--node N] -- CMD...   a command beside a running job, its output
//!                                    streamed, its exit status ours
//! ```
//!
//! Configuration comes from the environment (`SLURM_HOSTNAME`, `SLURM_USER`,
//! `SSH_KEY_PATH`, `SSH_KNOWN_HOSTS`, `SLURM_PARTITION`, `SLURM_BASE_RESULTS_DIR`,
//! `SLURM_ACCOUNT`, `SLURM_CONVERT_PARTITION`, `SLURM_CONTAINER_MOUNTS`,
//! `SLURM_RUN_STATE_DIR`); the flags `--host`, `--user`, `--key`, `--known-hosts`,
//! `--partition`, `--results-root`, `--account` and `--state-dir` override it.
//!
//! `--json` prints JSON Lines on stdout: one object per job (per transition for
//! `watch`, per check for `preflight`). Without it the output is aligned text, with
//! colour only when stdout is a terminal (and `NO_COLOR` is unset). A spinner shows
//! long waits on stderr when stderr is a terminal, and nothing on a pipe.
//!
//! Exit status:
//! - `0` success.
//! - `1` an internal error (a bug: please report it).
//! - `2` bad input or configuration: the message names the field and the fix. Error
//!   kinds Config, Invalid, Lint, Render, NotFound (a record, a log not written yet),
//!   Io (the record folder, the spec file), Parse of a local record, and Preflight
//!   when a check other than `ssh` failed (a partition that does not exist or is not
//!   up, a wall time above its MaxTime, an unwritable results root: the fix is on the
//!   caller's side).
//! - `3` the remote side or the connection failed: Connect, Auth, HostKey, Transport,
//!   Remote, Timeout, Ambiguous (a submit a person must settle), Parse of the
//!   cluster's output, and a failed `ssh` preflight check.
//! - `4` `watch` saw a job end ERROR, CANCELED or NOT_SUBMITTED (after its retries).

mod args;
mod connect;
mod exit;
mod json;
mod output;
mod progress;
mod text;
mod unsettled;
mod verbs;
mod waiting;

use std::process::ExitCode;

use clap::Parser;

use crate::args::Cli;
use crate::exit::exit_code;
use crate::output::Out;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Out::new(cli.global.json);
    match verbs::run(&cli, &out).await {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let code = exit_code(&error);
            out.error(&error, code);
            ExitCode::from(code)
        }
    }
}
