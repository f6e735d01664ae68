//! What a probe showed and what the ladder decides: the outcome read from the markers
//! and the job's end, the climb up the ladder, and the verdict with its remedy.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;

use serde::Serialize;

use super::job::{PROBE_BAD, PROBE_EXIT, PROBE_OK, PROBE_TIMEOUT};
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
    /// Rank 0 printed `PROBE_OK`: the collective works with this env.
    Ok,
    /// Rank 0 printed `PROBE_BAD`: the collective finished with a wrong sum. A
    /// hard fault (fabric, driver), not a hang: no knob is tried.
    Bad {
        /// The marker line.
        detail: String,
    },
    /// The probe did not finish in time (`PROBE_TIMEOUT`, exit code 124, or the
    /// job's wall time).
    Hung {
        /// What showed the hang.
        detail: String,
    },
    /// The job ended otherwise, without a marker (no torchrun in the image, a node
    /// failure, a cancel): trying NCCL knobs would not help.
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

/// One rung of the ladder, as it ran.
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
    /// Its `main.out` on the cluster (with the `NCCL_DEBUG=INFO` lines).
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
}

/// The outcome of a finished probe job from its marker lines and how it ended.
pub(crate) fn probe_outcome(
    state: JobState,
    native: Option<&NativeStatus>,
    markers: &str,
) -> ProbeOutcome {
    let line = |marker: &str| {
        markers
            .lines()
            .map(str::trim)
            .find(|l| l.contains(marker))
            .map(str::to_string)
    };
    if let Some(detail) = line(PROBE_BAD) {
        return ProbeOutcome::Bad { detail };
    }
    if line(PROBE_OK).is_some() {
        return ProbeOutcome::Ok;
    }
    if let Some(detail) = line(PROBE_TIMEOUT) {
        return ProbeOutcome::Hung { detail };
    }
    let scheduler = native.map(|n| n.state.as_str()).unwrap_or("");
    if native.and_then(|n| n.exit_code) == Some(124) {
        return ProbeOutcome::Hung {
            detail: "the probe exited 124 (timeout)".to_string(),
        };
    }
    if scheduler.starts_with("TIMEOUT") {
        return ProbeOutcome::Hung {
            detail: "the probe job reached its wall time".to_string(),
        };
    }
    let mut detail = format!("the probe job ended {state} without a probe marker");
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
    let exits: Vec<&str> = markers
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(PROBE_EXIT))
        .collect();
    if !exits.is_empty() {
        detail.push_str(&format!("; {}", exits.join("; ")));
    }
    ProbeOutcome::Failed { detail }
}

/// Try the rungs in order until one does not hang; the attempts made.
pub(crate) async fn climb<'a, F, Fut>(
    ladder: &'a [KnobSet],
    mut attempt: F,
) -> Result<Vec<ProbeAttempt>>
where
    F: FnMut(&'a KnobSet) -> Fut,
    Fut: Future<Output = Result<ProbeAttempt>>,
{
    let mut attempts: Vec<ProbeAttempt> = Vec::new();
    for rung in ladder {
        let done = attempt(rung).await?;
        let hung = matches!(done.outcome, ProbeOutcome::Hung { .. });
        tracing::info!(job = %done.job, env = ?done.env, outcome = %done.outcome, "NCCL probe");
        attempts.push(done);
        if !hung {
            break;
        }
    }
    Ok(attempts)
}

pub(crate) fn show_env(env: &KnobSet) -> String {
    let pairs: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// The knobs that worked, or the error that says which outcome stopped the ladder
/// and what to do.
pub(crate) fn verdict(cluster: &str, attempts: &[ProbeAttempt]) -> Result<KnobSet> {
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
            message: format!("FAILED on {cluster}: probe {}: {detail}", last.job),
            remedy: format!(
                "read the probe's logs ({log} and main.err beside it): the image needs torchrun and python3 with torch, and the nodes must start the job; or submit with nccl_probe: Never and set NCCL knobs in extra_env yourself"
            ),
        }),
        ProbeOutcome::Hung { .. } => {
            let tried: Vec<String> = attempts.iter().map(|a| show_env(&a.env)).collect();
            let logs: Vec<&str> = attempts.iter().filter_map(|a| a.log.as_deref()).collect();
            Err(Error::Preflight {
                kind: CheckKind::NcclProbe,
                check,
                message: format!(
                    "HUNG on {cluster}: the all-reduce hung with every env set tried: {}",
                    tried.join(" -> ")
                ),
                remedy: format!(
                    "read the NCCL_DEBUG=INFO logs of the probes ({}) for the transport that stalls; try other knobs (ProbeOptions::ladder, SLURM_NCCL_SOCKET_IFNAME for the right interface) or ask the cluster admins",
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

    fn attempt(env: KnobSet, outcome: ProbeOutcome) -> ProbeAttempt {
        ProbeAttempt {
            env,
            outcome,
            job: JobId::parse("nccl-probe-abcdef").unwrap(),
            native_id: None,
            log: Some("/r/nccl-probe-abcdef/logs/x/main.out".into()),
        }
    }

    fn hung() -> ProbeOutcome {
        ProbeOutcome::Hung { detail: "t".into() }
    }

    fn native(state: &str, exit: Option<i32>) -> NativeStatus {
        NativeStatus {
            state: state.into(),
            reason: None,
            exit_code: exit,
            nodes: None,
            source: "sacct",
        }
    }

    #[test]
    fn markers_decide_before_the_exit_code() {
        let ok = probe_outcome(
            JobState::Complete,
            Some(&native("COMPLETED", Some(0))),
            "NCCL_PROBE_OK world=16\n",
        );
        assert_eq!(ok, ProbeOutcome::Ok);
        let bad = probe_outcome(
            JobState::Error,
            Some(&native("FAILED", Some(3))),
            "NCCL_PROBE_BAD sum=10 expected=136\n",
        );
        assert_eq!(bad.name(), "BAD");
        assert!(bad.to_string().contains("sum=10 expected=136"), "{bad}");
        let hung = probe_outcome(
            JobState::Error,
            Some(&native("FAILED", Some(1))),
            "NCCL_PROBE_TIMEOUT node_rank=1 after 3s\n",
        );
        assert_eq!(hung.name(), "HUNG");
        assert_eq!(
            probe_outcome(JobState::Error, Some(&native("FAILED", Some(124))), "").name(),
            "HUNG"
        );
        assert_eq!(
            probe_outcome(JobState::Error, Some(&native("TIMEOUT", None)), "").name(),
            "HUNG"
        );
        let failed = probe_outcome(JobState::Error, Some(&native("FAILED", Some(127))), "");
        assert_eq!(failed.name(), "FAILED");
        assert!(failed.to_string().contains("exit code 127"), "{failed}");
        // Finished, but the command printed nothing: not OK.
        assert_eq!(
            probe_outcome(JobState::Complete, Some(&native("COMPLETED", Some(0))), "").name(),
            "FAILED"
        );
    }

    #[tokio::test]
    async fn the_ladder_stops_at_the_first_rung_that_does_not_hang() {
        let ladder = default_ladder("ib0");
        let mut seen = Vec::new();
        let attempts = climb(&ladder, |rung| {
            seen.push(rung.clone());
            let outcome = if rung.contains_key("NCCL_IB_DISABLE") {
                ProbeOutcome::Ok
            } else {
                hung()
            };
            let done = attempt(rung.clone(), outcome);
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(seen.len(), 3, "the fourth rung is not tried: {seen:?}");
        assert_eq!(attempts.len(), 3);
        let knobs = verdict("c1", &attempts).unwrap();
        assert_eq!(
            knobs,
            KnobSet::from([
                ("NCCL_IB_DISABLE".to_string(), "1".to_string()),
                ("NCCL_P2P_DISABLE".to_string(), "1".to_string()),
            ])
        );
    }

    #[tokio::test]
    async fn bad_stops_the_ladder_at_once_and_names_the_remedy() {
        let ladder = default_ladder("eth0");
        let mut calls = 0;
        let attempts = climb(&ladder, |rung| {
            calls += 1;
            let done = attempt(
                rung.clone(),
                ProbeOutcome::Bad {
                    detail: "NCCL_PROBE_BAD sum=3 expected=10".into(),
                },
            );
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(calls, 1);
        let err = verdict("c1", &attempts).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Preflight);
        let text = err.to_string();
        assert!(text.contains("BAD") && text.contains("admins"), "{text}");
        assert!(text.contains("sum=3 expected=10"), "{text}");
    }

    #[tokio::test]
    async fn every_rung_hung_lists_the_env_sets_and_the_logs() {
        let ladder = default_ladder("ib0");
        let attempts = climb(&ladder, |rung| {
            let done = attempt(rung.clone(), hung());
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(attempts.len(), 4);
        let text = verdict("c1", &attempts).unwrap_err().to_string();
        assert!(text.contains("HUNG"), "{text}");
        assert!(text.contains("{} -> {NCCL_P2P_DISABLE=1} ->"), "{text}");
        assert!(text.contains("NCCL_SOCKET_IFNAME=ib0"), "{text}");
        assert!(text.contains("NCCL_DEBUG=INFO"), "{text}");
        assert!(text.contains("/main.out"), "{text}");
        // An error of one attempt (not an outcome) stops the climb and is returned.
        let err = climb(&ladder, |_| async {
            Err::<ProbeAttempt, _>(Error::invalid("x", "boom"))
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("boom"));
    }

    #[test]
    fn a_probe_that_failed_without_a_verdict_says_how() {
        // The wrapper exits 0 (so srun keeps every task's output) and names the exit.
        let outcome = probe_outcome(
            JobState::Complete,
            Some(&native("COMPLETED", Some(0))),
            "NCCL_PROBE_EXIT node_rank=0 exit code 127\n",
        );
        match outcome {
            ProbeOutcome::Failed { detail } => {
                assert!(detail.contains("exit code 127"), "{detail}")
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }
}
