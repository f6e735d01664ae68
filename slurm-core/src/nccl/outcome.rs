//! What a probe showed and what the ladder decides: the outcome read from the markers
//! and the job's end, the climb up the ladder, and the verdict with its remedy.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use super::options::KnobSet;
use crate::backend::NativeStatus;
use crate::error::CheckKind;
use crate::record::JobId;
use crate::state::JobState;
use crate::{Error, Result};

/// What one probe job showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// Rank 0 printed `NCCL_PROBE_OK`: the collective works with this env.
    Ok,
    /// Rank 0 printed `NCCL_PROBE_BAD`: the collective finished with a wrong sum. A
    /// hard fault (fabric, driver), not a hang: no knob is tried.
    Bad {
        /// The marker line.
        detail: String,
    },
    /// The rung did not finish in time (its `timeout` fired, or the job reached its
    /// wall time).
    Hung {
        /// What showed the hang.
        detail: String,
    },
    /// The probe could not run or ended without a marker (no python3 or torchrun in
    /// the image, a node failure, a cancel): trying NCCL knobs would not help.
    Failed {
        /// How the job ended.
        detail: String,
    },
}

impl ProbeOutcome {
    /// `OK`, `BAD`, `HUNG` or `FAILED`.
    pub fn name(&self) -> &'static str {
        match self {
            ProbeOutcome::Ok => "OK",
            ProbeOutcome::Bad { .. } => "BAD",
            ProbeOutcome::Hung { .. } => "HUNG",
            ProbeOutcome::Failed { .. } => "FAILED",
        }
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeOutcome::Ok => f.write_str("OK"),
            ProbeOutcome::Bad { detail }
            | ProbeOutcome::Hung { detail }
            | ProbeOutcome::Failed { detail } => write!(f, "{} ({detail})", self.name()),
        }
    }
}

/// One rung of the ladder, as it ran (every rung runs in the same probe job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeAttempt {
    /// The knob env of this rung.
    pub env: KnobSet,
    /// What it showed.
    pub outcome: ProbeOutcome,
    /// The probe's record.
    pub job: JobId,
    /// The scheduler's id of the probe job (SLURM: its job id).
    pub native_id: Option<String>,
    /// The rung's output on the cluster (every node; with the `NCCL_DEBUG=INFO` lines):
    /// `<probe job folder>/nccl/rung-<i>.out`.
    pub log: Option<String>,
}

/// A probe that passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The cluster (its `ClusterName`), the key of the cache.
    pub cluster: String,
    /// The env that worked (empty when nothing was needed), now cached.
    pub knobs: KnobSet,
    /// Every rung tried, in order; the last one passed.
    pub attempts: Vec<ProbeAttempt>,
    /// The cache file written.
    pub cache_file: PathBuf,
    /// The probe job's record.
    pub job: JobId,
}

/// The rungs a probe job tried, read from its verdict file (see `probe_ladder.sh`), and
/// how the ladder ended when the job did not let it finish: `state` and `native` are
/// how the job ended, `None` while it has not.
pub(crate) fn ladder_outcomes(
    verdict: &str,
    state: JobState,
    native: Option<&NativeStatus>,
) -> Vec<(KnobSet, ProbeOutcome)> {
    let mut envs: Vec<KnobSet> = Vec::new();
    let mut rungs: Vec<(KnobSet, ProbeOutcome)> = Vec::new();
    let mut finished = false;
    let env_of = |envs: &mut Vec<KnobSet>, index: usize| -> KnobSet {
        envs.get(index).cloned().unwrap_or_default()
    };
    for line in verdict.lines() {
        let mut words = line.splitn(3, ' ');
        let (kind, first, rest) = (
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
        );
        match kind {
            "env" => {
                let (Ok(index), Some((name, value))) =
                    (first.parse::<usize>(), rest.split_once('='))
                else {
                    continue;
                };
                if envs.len() <= index {
                    envs.resize(index + 1, KnobSet::new());
                }
                envs[index].insert(name.to_string(), value.to_string());
            }
            "rung" => {
                let Ok(index) = first.parse::<usize>() else {
                    continue;
                };
                let (name, detail) = rest.split_once(' ').unwrap_or((rest, ""));
                let detail = detail.to_string();
                let outcome = match name {
                    "OK" => ProbeOutcome::Ok,
                    "BAD" => ProbeOutcome::Bad { detail },
                    "HUNG" => ProbeOutcome::Hung { detail },
                    _ => ProbeOutcome::Failed { detail },
                };
                rungs.push((env_of(&mut envs, index), outcome));
            }
            "end" => finished = true,
            _ => {}
        }
    }
    if finished || !state.is_terminal() {
        return rungs;
    }
    // The job ended before its ladder did: how, in the scheduler's words.
    let scheduler = native.map(|n| n.state.as_str()).unwrap_or("");
    let mut detail = format!(
        "the probe job ended {state} before its ladder finished ({} of its rungs done)",
        rungs.len()
    );
    if let Some(native) = native {
        detail.push_str(&format!(" (SLURM {}", native.state));
        if let Some(code) = native.exit_code {
            detail.push_str(&format!(", exit code {code}"));
        }
        if let Some(reason) = &native.reason {
            detail.push_str(&format!(", {reason}"));
        }
        detail.push(')');
    }
    if verdict.trim().is_empty() {
        detail.push_str("; it wrote no verdict (the batch step needs bash and timeout on the node; read its main.err)");
    }
    let env = env_of(&mut envs, rungs.len());
    let outcome = if scheduler.starts_with("TIMEOUT") {
        ProbeOutcome::Hung {
            detail: format!("{detail}: it reached its wall time"),
        }
    } else {
        ProbeOutcome::Failed { detail }
    };
    rungs.push((env, outcome));
    rungs
}

pub(crate) fn show_env(env: &KnobSet) -> String {
    let pairs: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// The knobs that worked, or the error that says which outcome stopped the ladder
/// and what to do.
pub(crate) fn verdict_of(cluster: &str, attempts: &[ProbeAttempt]) -> Result<KnobSet> {
    let check = "nccl probe".to_string();
    let Some(last) = attempts.last() else {
        return Err(Error::invalid(
            "ladder",
            "empty; give at least one env set (an empty set probes without knobs)",
        ));
    };
    let log = last.log.as_deref().unwrap_or("its main.out");
    match &last.outcome {
        ProbeOutcome::Ok => Ok(last.env.clone()),
        ProbeOutcome::Bad { detail } => Err(Error::Preflight {
            kind: CheckKind::NcclProbe,
            check,
            message: format!(
                "BAD on {cluster}: the all-reduce of probe {} finished with a wrong sum ({detail}) with env {}",
                last.job,
                show_env(&last.env)
            ),
            remedy: format!(
                "a hardware or driver fault, not a hang: NCCL knobs will not fix it; check the GPU fabric and drivers of the nodes (NCCL_DEBUG=INFO log: {log}), exclude the bad nodes or ask the cluster admins"
            ),
        }),
        ProbeOutcome::Failed { detail } => Err(Error::Preflight {
            kind: CheckKind::NcclProbe,
            check,
            message: format!("FAILED on {cluster}: probe {} could not run its all-reduce: {detail}", last.job),
            remedy: format!(
                "read the probe's output ({log}, and the probe job's main.err): the probe runs torchrun and python3 with torch in the job's image, on every node; use an image that has them, or submit without the probe (`nccl_probe: never` in the spec, `slurmctl submit --probe never`, NcclProbe::Never) and set the NCCL knobs in extra_env yourself"
            ),
        }),
        ProbeOutcome::Hung { .. } => {
            let tried: Vec<String> = attempts.iter().map(|a| show_env(&a.env)).collect();
            let logs: Vec<&str> = attempts.iter().filter_map(|a| a.log.as_deref()).collect();
            Err(Error::Preflight {
                kind: CheckKind::NcclProbe,
                check,
                message: format!(
                    "HUNG on {cluster}: the all-reduce of probe {} hung with every env set tried: {}",
                    last.job,
                    tried.join(" -> ")
                ),
                remedy: format!(
                    "read the NCCL_DEBUG=INFO output of the rungs ({}) for the transport that stalls; try other knobs (ProbeOptions::ladder, SLURM_NCCL_SOCKET_IFNAME for the right interface) or ask the cluster admins; to run without the probe: `nccl_probe: never` with the knobs in extra_env",
                    if logs.is_empty() { "none was written".to_string() } else { logs.join(", ") }
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::default_ladder;

    fn attempts(
        verdict: &str,
        state: JobState,
        native: Option<&NativeStatus>,
    ) -> Vec<ProbeAttempt> {
        ladder_outcomes(verdict, state, native)
            .into_iter()
            .enumerate()
            .map(|(i, (env, outcome))| ProbeAttempt {
                env,
                outcome,
                job: JobId::parse("nccl-probe-abcdef").unwrap(),
                native_id: Some("77".into()),
                log: Some(format!("/r/nccl-probe-abcdef/nccl/rung-{i}.out")),
            })
            .collect()
    }

    fn native(state: &str, exit: Option<i32>) -> NativeStatus {
        NativeStatus {
            reason_note: None,
            state: state.into(),
            reason: None,
            exit_code: exit,
            nodes: None,
            source: "sacct",
            category: None,
        }
    }

    #[test]
    fn the_verdict_file_gives_each_rung_its_env_and_the_passing_knobs() {
        let verdict = "rung 0 HUNG no verdict within 120s (timeout exit 124)\n\
                       env 1 NCCL_P2P_DISABLE=1\n\
                       rung 1 HUNG no verdict within 120s (timeout exit 124)\n\
                       env 2 NCCL_IB_DISABLE=1\nenv 2 NCCL_P2P_DISABLE=1\n\
                       rung 2 OK NCCL_PROBE_OK world=16 backend=nccl\nend OK 2\n";
        let done = attempts(
            verdict,
            JobState::Complete,
            Some(&native("COMPLETED", Some(0))),
        );
        let names: Vec<&str> = done.iter().map(|a| a.outcome.name()).collect();
        assert_eq!(names, ["HUNG", "HUNG", "OK"]);
        assert!(done[0].env.is_empty());
        assert_eq!(done[1].env, default_ladder("x")[1]);
        let knobs = verdict_of("c1", &done).unwrap();
        assert_eq!(knobs, default_ladder("x")[2]);
        // A value holding `=` and spaces survives.
        let done = attempts(
            "env 0 NCCL_SOCKET_IFNAME=^lo, docker=0\nrung 0 OK NCCL_PROBE_OK\nend OK 0\n",
            JobState::Complete,
            None,
        );
        assert_eq!(done[0].env["NCCL_SOCKET_IFNAME"], "^lo, docker=0");
        // A ladder still running has only its finished rungs.
        let running = attempts("rung 0 HUNG t\n", JobState::Running, None);
        assert_eq!(running.len(), 1);
    }

    #[test]
    fn bad_stops_the_ladder_and_names_the_remedy() {
        let done = attempts(
            "rung 0 BAD NCCL_PROBE_BAD sum=3 expected=10\nend BAD 0\n",
            JobState::Error,
            Some(&native("FAILED", Some(3))),
        );
        assert_eq!(done.len(), 1);
        let err = verdict_of("c1", &done).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Preflight);
        let text = err.to_string();
        assert!(text.contains("BAD") && text.contains("admins"), "{text}");
        assert!(text.contains("sum=3 expected=10"), "{text}");
    }

    #[test]
    fn every_rung_hung_lists_the_env_sets_and_the_outputs() {
        let mut verdict = String::new();
        for (i, rung) in default_ladder("ib0").iter().enumerate() {
            for (k, v) in rung {
                verdict.push_str(&format!("env {i} {k}={v}\n"));
            }
            verdict.push_str(&format!("rung {i} HUNG no verdict within 120s\n"));
        }
        verdict.push_str("end HUNG 3\n");
        let done = attempts(&verdict, JobState::Error, Some(&native("FAILED", Some(3))));
        assert_eq!(done.len(), 4);
        let text = verdict_of("c1", &done).unwrap_err().to_string();
        assert!(text.contains("HUNG"), "{text}");
        assert!(text.contains("{} -> {NCCL_P2P_DISABLE=1} ->"), "{text}");
        assert!(text.contains("NCCL_SOCKET_IFNAME=ib0"), "{text}");
        assert!(text.contains("/nccl/rung-3.out"), "{text}");
        assert!(text.contains("nccl_probe: never"), "{text}");
    }

    #[test]
    fn a_probe_that_cannot_run_names_the_switch() {
        let done = attempts(
            "rung 0 FAILED NCCL_PROBE_EXIT node_rank=0 cannot run: no torchrun on the PATH\nend FAILED 0\n",
            JobState::Error,
            Some(&native("FAILED", Some(3))),
        );
        let text = verdict_of("c1", &done).unwrap_err().to_string();
        assert!(
            text.contains("FAILED") && text.contains("no torchrun"),
            "{text}"
        );
        assert!(text.contains("--probe never"), "{text}");
        assert!(text.contains("nccl_probe: never"), "{text}");
    }

    #[test]
    fn a_job_that_ended_before_its_ladder_says_how() {
        // Cut by its wall time mid-rung: a hang.
        let done = attempts(
            "rung 0 HUNG t\nenv 1 NCCL_P2P_DISABLE=1\n",
            JobState::Error,
            Some(&native("TIMEOUT", None)),
        );
        assert_eq!(done.len(), 2);
        assert_eq!(done[1].outcome.name(), "HUNG");
        assert_eq!(done[1].env["NCCL_P2P_DISABLE"], "1");
        // Killed (a node failure, a cancel): FAILED, with the scheduler's words.
        let done = attempts("", JobState::Error, Some(&native("NODE_FAIL", Some(1))));
        let text = done[0].outcome.to_string();
        assert_eq!(done[0].outcome.name(), "FAILED", "{text}");
        assert!(
            text.contains("NODE_FAIL") && text.contains("wrote no verdict"),
            "{text}"
        );
        // No rung at all is an error, not a pass.
        assert!(verdict_of("c1", &[]).is_err());
    }
}
