//! Failure classification (infrastructure or program) from how a job ended and its log tail, and the retry policy.
//!
//! How a job ended is described in scheduler-neutral words ([`Ending`]); each backend
//! maps its scheduler's states to them (SLURM's mapping is in the `slurm` module).
//! The rules, in order ([`classify_failure`]):
//! 1. A node failure, a boot failure, a preemption: infra (the node or the scheduler failed the job).
//! 2. The wall time, the memory limit or the deadline reached, and exit code 124 (the child timeout fired): program (never retried).
//! 3. A program pattern anywhere in the last [`LOG_TAIL_LINES`] lines: program. Program errors win over
//!    infra noise (a device-side assert followed by NCCL errors is the program's fault).
//! 4. An infra pattern: infra (NCCL errors and timeouts, CUDA driver or device init failures, Xid, ECC,
//!    GPU or InfiniBand link down, the kernel OOM killer reaping the node, ...).
//! 5. A Python traceback (with no infra pattern): program.
//! 6. Empty or unreadable logs for a failed job: infra (the job died before it could write).
//! 7. Anything else (an ordinary non-zero exit): program.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use regex::RegexSet;
use serde::{Deserialize, Serialize};

/// Which side failed a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ErrorClass {
    /// The cluster failed the job (node, GPU, network, driver): worth a retry.
    #[serde(rename = "ERR_INFRA")]
    Infra,
    /// The job's own failure (bad code, bad spec, out of time or memory): not retried.
    #[serde(rename = "ERR_PROGRAM")]
    Program,
}

impl ErrorClass {
    /// `ERR_INFRA` or `ERR_PROGRAM`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Infra => "ERR_INFRA",
            ErrorClass::Program => "ERR_PROGRAM",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a job that did not complete ended, in words any scheduler maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ending {
    /// The job's program failed (a non-zero exit, a signal), or the scheduler says
    /// only that it failed: the logs decide.
    Failed {
        /// The exit code, when known.
        exit_code: Option<i32>,
    },
    /// A node the job ran on failed.
    NodeFailure,
    /// A node could not be booted or started for the job.
    BootFailure,
    /// The scheduler stopped the job for another.
    Preempted,
    /// The job reached its wall time.
    TimeLimit,
    /// The job exceeded its memory limit.
    OutOfMemory,
    /// The job could not finish before its deadline.
    Deadline,
}

/// The exit status of `timeout` when it killed the command: the job's own child
/// timeout fired (a program error, never retried), not a crash.
pub(crate) const CHILD_TIMEOUT_EXIT: i32 = 124;

/// What a record says of a command killed by its own child timeout.
pub(crate) const CHILD_TIMEOUT_NOTE: &str = "killed by its own time limit (the child timeout fired: `timeout` exit 124), not a crash; raise `child_timeout` or `time` if the command needs longer";

/// How many trailing lines of the logs are read.
pub(crate) const LOG_TAIL_LINES: usize = 500;

/// Patterns (case-insensitive) of a program's own failure; they win over infra noise.
pub(crate) const PROGRAM_PATTERNS: &[&str] = &[
    r"device-side assert",
    r"illegal memory access",
    r"CUBLAS_STATUS_",
    r"CUDNN_STATUS_",
    r"cuDNN error",
    r"CUDA out of memory",
    r"OutOfMemoryError",
    r"FileNotFoundError",
    r"can't open file",
    r"ModuleNotFoundError",
    r"SyntaxError",
    r"IndentationError",
    r"NameError",
    r"KeyError",
    r"AttributeError",
    r"TypeError",
    r"ValueError",
    r"AssertionError",
    r"ZeroDivisionError",
    r"command not found",
    r"Detected \d+ oom[-_]kill event",
];

/// Patterns (case-insensitive) of an infrastructure failure (FACTS.md plus the issue's list).
pub(crate) const INFRA_PATTERNS: &[&str] = &[
    r"NVIDIA driver.*too old",
    r"CUDA driver version is insufficient",
    r"no CUDA-capable device",
    r"CUDA initialization.*error",
    r"NCCL.*error",
    r"NCCL.*time(d)?[ _-]?out",
    r"Watchdog caught collective operation timeout",
    r"NET/IB.*(error|fail)",
    r"transport.*(error|fail)",
    r"GPU.*not found",
    r"RuntimeError.*CUDA",
    r"cuInit.*failed",
    r"torch\.cuda\.is_available.*False",
    r"Unable to determine the device handle for GPU",
    r"GPU.*fallen off the bus",
    r"Xid",
    r"ECC.*error",
    r"GPU.*temperature",
    r"InfiniBand.*(error|down)",
    r"RDMA.*error",
    r"(GPU|NVLink|InfiniBand|\bib\d*\b|mlx\d+_\d+).*link.*down",
    r"invoked oom-killer",
    r"oom_reaper",
    r"Out of memory: Kill(ed)? process",
    // The container runtime failed on the node (Pyxis's SPANK hook in the step).
    r"task_init\(\) failed",
    r"pyxis: container start failed",
    // The controller went away as the job's step started.
    r"Unable to confirm allocation for job",
];

/// Patterns (case-insensitive) of an infra failure tied to the node it ran on (a GPU,
/// its driver, the node's memory or its network card): a retry avoids that node.
pub(crate) const NODE_PATTERNS: &[&str] = &[
    r"NVIDIA driver.*too old",
    r"no CUDA-capable device",
    r"CUDA initialization.*error",
    r"GPU.*not found",
    r"cuInit.*failed",
    r"Unable to determine the device handle for GPU",
    r"GPU.*fallen off the bus",
    r"Xid",
    r"ECC.*error",
    r"GPU.*temperature",
    r"(GPU|NVLink|InfiniBand|\bib\d*\b|mlx\d+_\d+).*link.*down",
    r"invoked oom-killer",
    r"oom_reaper",
    r"task_init\(\) failed",
    r"pyxis: container start failed",
];

/// Whether an infra failure is tied to its node (so a retry should exclude it): a node
/// or boot failure, or a log tail naming a node's GPU, driver, memory or link.
pub(crate) fn is_node_fault(ending: Ending, log_tail: &str) -> bool {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    match ending {
        Ending::NodeFailure | Ending::BootFailure => true,
        Ending::Failed { .. } => SET
            .get_or_init(|| {
                RegexSet::new(NODE_PATTERNS.iter().map(|p| format!("(?i){p}")))
                    .expect("node patterns compile")
            })
            .is_match(tail(log_tail)),
        _ => false,
    }
}

/// The pattern marking a Python traceback.
pub(crate) const TRACEBACK_PATTERN: &str = r"Traceback \(most recent call last\)";

fn program_set() -> &'static RegexSet {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    SET.get_or_init(|| {
        RegexSet::new(PROGRAM_PATTERNS.iter().map(|p| format!("(?i){p}")))
            .expect("program patterns compile")
    })
}

fn infra_set() -> &'static RegexSet {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    SET.get_or_init(|| {
        RegexSet::new(INFRA_PATTERNS.iter().map(|p| format!("(?i){p}")))
            .expect("infra patterns compile")
    })
}

fn traceback_set() -> &'static RegexSet {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    SET.get_or_init(|| RegexSet::new([TRACEBACK_PATTERN]).expect("traceback pattern compiles"))
}

/// The last [`LOG_TAIL_LINES`] lines of `text`.
fn tail(text: &str) -> &str {
    let mut count = 0;
    for (i, b) in text.bytes().enumerate().rev() {
        if b == b'\n' && i + 1 < text.len() {
            count += 1;
            if count == LOG_TAIL_LINES {
                return &text[i + 1..];
            }
        }
    }
    text
}

/// Decide whether a failed job failed for infrastructure or program reasons
/// (the rules are in the module docs). `log_tail` is the end of main.out and
/// main.err together; only its last [`LOG_TAIL_LINES`] lines are read.
pub(crate) fn classify_failure(ending: Ending, log_tail: &str) -> ErrorClass {
    let exit_code = match ending {
        Ending::NodeFailure | Ending::BootFailure | Ending::Preempted => return ErrorClass::Infra,
        Ending::TimeLimit | Ending::OutOfMemory | Ending::Deadline => return ErrorClass::Program,
        Ending::Failed { exit_code } => exit_code,
    };
    if exit_code == Some(CHILD_TIMEOUT_EXIT) {
        return ErrorClass::Program;
    }
    let text = tail(log_tail);
    if program_set().is_match(text) {
        return ErrorClass::Program;
    }
    if infra_set().is_match(text) {
        return ErrorClass::Infra;
    }
    if traceback_set().is_match(text) {
        return ErrorClass::Program;
    }
    if text.trim().is_empty() {
        return ErrorClass::Infra;
    }
    ErrorClass::Program
}

/// When to resubmit a failed job as a new record (`retry_of`). A value the caller may change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// How many retries one job may have in total (the reference's budget is 10).
    pub budget: u32,
    /// Which error classes are retried (by default infra only).
    pub retry_on: BTreeSet<ErrorClass>,
}

/// The reference's retry budget.
pub(crate) const DEFAULT_RETRY_BUDGET: u32 = 10;

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: DEFAULT_RETRY_BUDGET,
            retry_on: BTreeSet::from([ErrorClass::Infra]),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        RetryPolicy {
            budget: 0,
            retry_on: BTreeSet::new(),
        }
    }

    /// Whether a job whose attempt number `attempt` (1 for the first submit)
    /// failed with `class` gets another attempt: the class is retried and fewer
    /// than `budget` retries were spent (`attempt - 1 < budget`).
    pub fn should_retry(&self, class: ErrorClass, attempt: u32) -> bool {
        self.retry_on.contains(&class) && attempt.saturating_sub(1) < self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorClass::{Infra, Program};
    use super::*;

    #[test]
    fn failures_classified_by_ending_and_log() {
        let failed = Ending::Failed { exit_code: Some(1) };
        assert_eq!(
            classify_failure(failed, "NCCL error: unhandled system error"),
            ErrorClass::Infra
        );
        assert_eq!(
            classify_failure(failed, "Traceback (most recent call last):\nKeyError: 'lr'"),
            ErrorClass::Program
        );
        assert_eq!(
            classify_failure(Ending::NodeFailure, "KeyError: 'lr'"),
            ErrorClass::Infra
        );
    }

    #[test]
    fn node_faults_by_ending_and_log() {
        assert!(is_node_fault(Ending::NodeFailure, ""));
        assert!(is_node_fault(
            Ending::Failed { exit_code: Some(1) },
            "NVRM: Xid 79"
        ));
        assert!(!is_node_fault(
            Ending::Failed { exit_code: Some(1) },
            "NCCL error: remote peer"
        ));
    }

    /// The ending a SLURM state names (the mapping proper is tested in the slurm room).
    fn st(state: &str, exit_code: Option<i32>) -> Ending {
        match state {
            "NODE_FAIL" => Ending::NodeFailure,
            "BOOT_FAIL" => Ending::BootFailure,
            "PREEMPTED" => Ending::Preempted,
            "TIMEOUT" => Ending::TimeLimit,
            "OUT_OF_MEMORY" => Ending::OutOfMemory,
            "DEADLINE" => Ending::Deadline,
            _ => Ending::Failed { exit_code },
        }
    }

    #[test]
    fn states_that_decide_alone() {
        for s in ["NODE_FAIL", "BOOT_FAIL", "PREEMPTED"] {
            assert_eq!(
                classify_failure(st(s, Some(1)), "Traceback (most recent call last)"),
                Infra,
                "{s}"
            );
        }
        for s in ["TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"] {
            assert_eq!(
                classify_failure(st(s, Some(0)), "NCCL error"),
                Program,
                "{s}"
            );
        }
        assert_eq!(
            classify_failure(st("FAILED", Some(124)), "NCCL error"),
            Program
        );
    }

    #[test]
    fn each_infra_pattern() {
        let lines = [
            "NVIDIA driver on your system is too old (found version 10010)",
            "CUDA driver version is insufficient for CUDA runtime version",
            "RuntimeError: No CUDA-capable device is detected",
            "CUDA initialization: unexpected error from cudaGetDeviceCount()",
            "NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error",
            "NCCL WARN Timeout waiting for connect",
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12)",
            "NET/IB : Got completion from peer with error 12",
            "misc/socket.cc: transport/net_socket.cc:461 failed",
            "GPU 0000:3b:00.0 not found",
            "RuntimeError: CUDA error: unknown error",
            "cuInit(0) failed with 999",
            "torch.cuda.is_available() returned False",
            "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
            "GPU 0000:3b:00.0 has fallen off the bus",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234",
            "uncorrectable ECC error encountered",
            "GPU 3 temperature above threshold",
            "InfiniBand port 1 error",
            "RDMA connection error",
            "mlx5_0: port 1 link down",
            "GPU 2 NVLink link 4 is down",
            "kernel: python invoked oom-killer: gfp_mask=0x100cca",
            "oom_reaper: reaped process 4242 (python)",
            "Out of memory: Killed process 4242 (python)",
            "spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
            "slurmstepd: error: pyxis: container start failed with error code: 1",
            "srun: error: Unable to confirm allocation for job 4242: Connection reset by peer",
        ];
        assert!(lines.len() >= INFRA_PATTERNS.len());
        for line in lines {
            let log =
                format!("epoch 1\n{line}\nsrun: error: n1: task 0: Exited with exit code 1\n");
            assert_eq!(
                classify_failure(st("FAILED", Some(1)), &log),
                Infra,
                "{line}"
            );
        }
    }

    #[test]
    fn program_errors_win_over_infra_noise() {
        let assert_then_nccl = "\
/pytorch/aten/src/ATen/native/cuda/Loss.cu:240: block: [0,0,0], thread: [1,0,0] Assertion `t >= 0 && t < n_classes` failed.
RuntimeError: CUDA error: device-side assert triggered
NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled cuda error
";
        assert_eq!(
            classify_failure(st("FAILED", Some(1)), assert_then_nccl),
            Program
        );
        for line in [
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm",
            "RuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/x'",
            "ModuleNotFoundError: No module named 'foo'",
            "slurmstepd: error: Detected 1 oom_kill event in StepId=12.batch. Some of the step tasks have been OOM Killed.",
        ] {
            assert_eq!(classify_failure(st("FAILED", Some(1)), line), Program, "{line}");
        }
    }

    #[test]
    fn tracebacks_plain_exits_and_empty_logs() {
        let tb =
            "Traceback (most recent call last):\n  File \"train.py\", line 3\nRuntimeError: boom\n";
        assert_eq!(classify_failure(st("FAILED", Some(1)), tb), Program);
        // A traceback whose cause is an NCCL timeout is infra.
        let nccl_tb = "Traceback (most recent call last):\ntorch.distributed.DistBackendError: NCCL communicator was aborted: Watchdog caught collective operation timeout\n";
        assert_eq!(classify_failure(st("FAILED", Some(1)), nccl_tb), Infra);
        assert_eq!(
            classify_failure(st("FAILED", Some(2)), "loss=nan, giving up\n"),
            Program
        );
        assert_eq!(classify_failure(st("FAILED", Some(1)), ""), Infra);
        assert_eq!(classify_failure(st("FAILED", None), " \n\n"), Infra);
    }

    #[test]
    fn only_the_tail_is_read() {
        let mut log = String::from("NCCL error early on\n");
        for i in 0..LOG_TAIL_LINES {
            log.push_str(&format!("step {i}\n"));
        }
        assert_eq!(classify_failure(st("FAILED", Some(1)), &log), Program);
        log.push_str("Xid 79\n");
        assert_eq!(classify_failure(st("FAILED", Some(1)), &log), Infra);
    }

    #[test]
    fn retry_policy_budget_and_classes() {
        let p = RetryPolicy::default();
        assert_eq!(p.budget, 10);
        assert!(p.should_retry(Infra, 1));
        assert!(p.should_retry(Infra, 10));
        assert!(!p.should_retry(Infra, 11));
        assert!(!p.should_retry(Program, 1));
        let custom = RetryPolicy {
            budget: 1,
            retry_on: BTreeSet::from([Infra, Program]),
        };
        assert!(custom.should_retry(Program, 1));
        assert!(!custom.should_retry(Program, 2));
        assert!(!RetryPolicy::never().should_retry(Infra, 1));
        assert_eq!(serde_json::to_string(&Infra).unwrap(), "\"ERR_INFRA\"");
        assert_eq!(
            serde_json::from_str::<ErrorClass>("\"ERR_PROGRAM\"").unwrap(),
            Program
        );
    }

    #[test]
    fn the_container_runtime_and_the_controller_failing_are_infra() {
        // Defect 17: Pyxis's task_init() failing on a node (the container runtime) and the
        // controller going away as the job started were program errors, never retried.
        let pyxis = "slurmstepd: error: pyxis: container start failed with error code: 1\n\
            slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n\
            srun: error: task 0 launch failed: Plugin initialization failed\n";
        assert_eq!(classify_failure(st("FAILED", Some(1)), pyxis), Infra);
        assert!(
            is_node_fault(st("FAILED", Some(1)), pyxis),
            "the retry avoids the node whose runtime failed"
        );
        let controller =
            "srun: error: Unable to confirm allocation for job 4242: Connection reset by peer\n";
        assert_eq!(classify_failure(st("FAILED", Some(1)), controller), Infra);
        assert!(!is_node_fault(st("FAILED", Some(1)), controller));
    }
}
