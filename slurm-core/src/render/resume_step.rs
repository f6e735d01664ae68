//! The step a resumable job's command runs in: a shell on each node that passes the
//! batch script's warning on to the command's process group alone.

use crate::spec::WARNING_CARRIER;
use crate::transport::shell_quote;
use crate::Result;

/// What a resumable job's step runs on each node: a shell that starts `command` as a
/// process group of its own and passes the carrier signal on to that group as `signal`.
/// The group alone gets it: Slurm signals every process of a step, and the container
/// runtime's (squashfuse, fuse-overlayfs) die of the resume signal, taking the
/// command's root filesystem with them. The shell running `command` ignores `signal`
/// (its programs, python or torchrun, get it and can checkpoint), and its first act
/// notes in `ready_dir` that the command has started on this node (the batch script
/// holds the warning back until every node's has). The step ends with `command`'s
/// status.
pub fn resume_step_command(command: &str, signal: &str, ready_dir: &str) -> Result<String> {
    let (carrier, _) = WARNING_CARRIER;
    let group = format!(
        "trap : {signal}  # slurm-run: the resume signal is for the command, not this shell\n\
         : > {ready}/\"${{SLURM_NODEID:-0}}\"  # slurm-run: the command has started on this node\n\
         {command}",
        ready = shell_quote(ready_dir)?,
    );
    Ok(format!(
        r#"# slurm-run: the command runs as a process group of its own; SIG{carrier} from the
# batch script reaches it as SIG{signal}, and no other process of the step gets that.
set -m
slurm_run_command='' slurm_run_pending=0
slurm_run_pass() {{
  if [ -n "$slurm_run_command" ]; then
    kill -s {signal} -- "-$slurm_run_command" 2>/dev/null
  else
    slurm_run_pending=1
  fi
}}
trap 'slurm_run_warned=1; slurm_run_pass' {carrier}
trap 'slurm_run_warned=1' {signal}
bash -c {group} slurm-run-command &
slurm_run_command=$!
if [ "$slurm_run_pending" = 1 ]; then slurm_run_pass; fi
# A trapped signal interrupts wait (status above 128) while the command runs on.
while :; do
  slurm_run_warned=0 slurm_run_status=0
  wait "$slurm_run_command" || slurm_run_status=$?
  if [ "$slurm_run_warned" = 0 ] || [ "$slurm_run_status" -le 128 ]; then break; fi
done
exit "$slurm_run_status""#,
        group = shell_quote(&group)?,
    ))
}
