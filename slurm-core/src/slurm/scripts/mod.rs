//! The bash scripts the SLURM backend runs on the login node, one `.sh` file each,
//! with their exit statuses named once.
//!
//! Every script is fixed text of ours; user values reach it only as positional
//! parameters, quoted once by the transport. `full_text` of each (with its prelude) is
//! checked by `bash -n` in this module's tests, and by shellcheck in the test bed's
//! tests ([`all`] lists them).

use crate::transport::round_trip::framed;
use crate::transport::script::{exit_statuses, Script};

exit_statuses! {
    /// How the submit script ([`SUBMIT`]) stops before sbatch runs.
    pub(crate) enum SubmitExit {
        /// The staged files failed their checksum check (nothing was submitted; the
        /// upload can be sent again).
        ChecksumMismatch = 65 => "EXIT_CHECKSUM_MISMATCH",
        /// The `.sqsh` image is missing or not a squashfs file.
        ImageMissing = 66 => "EXIT_IMAGE_MISSING",
        /// A dataset path does not exist on the cluster.
        DatasetsMissing = 67 => "EXIT_DATASETS_MISSING",
        /// The job folder is not there after unpacking.
        NoJobFolder = 68 => "EXIT_NO_JOB_FOLDER",
        /// The staged archive did not unpack.
        UnpackFailed = 69 => "EXIT_UNPACK_FAILED",
        /// This attempt's folder `.sbatch-N` already exists: a settle fenced it, or the
        /// attempt was made before (its outcome is on disk); sbatch did not run now.
        Fenced = 71 => "EXIT_FENCED",
        /// The job folder belongs to another record of the same name (another store
        /// sharing the results root): nothing of this record was sent or submitted.
        Claimed = 72 => "EXIT_CLAIMED",
    }
}

exit_statuses! {
    /// How the conversion script ([`CONVERT_IMAGE`]) fails.
    pub(crate) enum ConvertExit {
        /// The conversion job never started (srun refused it: a partition, a limit).
        JobFailed = 70 => "EXIT_JOB_FAILED",
        /// enroot is not on PATH on the conversion node.
        NoEnroot = 71 => "EXIT_NO_ENROOT",
        /// enroot failed (its lines on stderr say how: the caller reads them), or the
        /// file could not be placed.
        ConvertFailed = 72 => "EXIT_CONVERT_FAILED",
        /// The result is not a whole squashfs image.
        NotAnImage = 75 => "EXIT_NOT_AN_IMAGE",
    }
}

exit_statuses! {
    /// How the image check ([`CHECK_SQSH`]) fails.
    pub(crate) enum CheckSqshExit {
        /// The file is missing, truncated or no squashfs image.
        NotWhole = 66 => "EXIT_NOT_WHOLE",
    }
}

exit_statuses! {
    /// How the log reader ([`READ_FROM`]) fails.
    pub(crate) enum ReadFromExit {
        /// The log file does not exist (yet).
        NoFile = 3 => "EXIT_NO_FILE",
    }
}

exit_statuses! {
    /// How the fresh continuation of a resumable run ([`CONTINUE_FRESH`]) fails.
    pub(crate) enum ContinueFreshExit {
        /// The marker could not be made, or sbatch refused the fresh job (its stderr says why).
        Failed = 3 => "EXIT_FAILED",
    }
}

exit_statuses! {
    /// How receiving a code tree ([`CODE_PUT`]) fails.
    pub(crate) enum CodePutExit {
        /// An object's content does not match its name (SHA-256): nothing of it is kept.
        ChecksumMismatch = 65 => "EXIT_CHECKSUM_MISMATCH",
        /// The archive did not unpack (or the last one had no manifest).
        UnpackFailed = 69 => "EXIT_UNPACK_FAILED",
        /// An object the manifest names is not on the cluster.
        ObjectMissing = 76 => "EXIT_OBJECT_MISSING",
        /// The code store under the results root cannot be written.
        StoreUnwritable = 77 => "EXIT_STORE_UNWRITABLE",
    }
}

/// Which objects of a code tree the cluster lacks (names on stdin), or that the tree
/// is already whole.
pub(crate) const CODE_MISSING: Script =
    Script::new("code-missing", include_str!("code_missing.sh"));

/// Receive a code tree's objects (checked against their SHA-256 names) and make the
/// tree from its manifest, read-only.
pub(crate) const CODE_PUT: Script =
    Script::new("code-put", include_str!("code_put.sh")).with_exits(CodePutExit::VARS);

/// Check the datasets and the image, unpack the staged job folder from stdin, verify
/// its checksums, claim the attempt's folder, `sbatch --parsable` (its answer kept in
/// that folder): a steady-state submit in one round trip.
pub(crate) const SUBMIT: Script = Script::new(
    "submit",
    concat!(include_str!("claim.sh"), "\n", include_str!("submit.sh")),
)
.with_exits(SubmitExit::VARS)
.with_library(SQSH_LIBRARY, &[]);

/// `sqsh_whole FILE`: the squashfs magic and a size at least the superblock's.
const SQSH_LIBRARY: &str = include_str!("sqsh.sh");

/// Convert a registry image to a `.sqsh` on the CPU partition, once per image at a time.
pub(crate) const CONVERT_IMAGE: Script =
    Script::new("convert-image", include_str!("convert_image.sh"))
        .with_exits(ConvertExit::VARS)
        .with_library(SQSH_LIBRARY, &[]);

/// The command of a conversion job (on the CPU partition; the GPU job waits for it):
/// convert a registry image to a `.sqsh`, once per image at a time. Not run on the login
/// node: its [`full_text`](Script::full_text) is the job's `command`.
pub(crate) const CONVERT_JOB: Script =
    Script::new("convert-job", include_str!("convert_job.sh")).with_library(SQSH_LIBRARY, &[]);

/// Whether a `.sqsh` is a whole squashfs image.
pub(crate) const CHECK_SQSH: Script = Script::new("check-sqsh", include_str!("check_sqsh.sh"))
    .with_exits(CheckSqshExit::VARS)
    .with_library(SQSH_LIBRARY, &[]);

/// Install or remove enroot registry credentials (the secret on stdin only).
pub(crate) const CREDENTIALS: Script = Script::new("credentials", include_str!("credentials.sh"));

/// squeue for every tracked job, then sacct for the ones squeue cannot settle, framed;
/// the ids come on standard input.
pub(crate) const POLL: Script = framed(Script::new("poll", include_str!("poll.sh")));

/// Settle unknown submit outcomes: fence every attempt, read the answers they left,
/// and list the user's own jobs carrying the names (squeue, sacct), framed.
pub(crate) const SETTLE: Script = framed(Script::new(
    "settle",
    concat!(include_str!("claim.sh"), "\n", include_str!("settle.sh")),
));

/// Remove the secrets sidecars of ended jobs; prints the names whose sidecar is gone.
pub(crate) const FORGET_SECRETS: Script = Script::new(
    "forget-secrets",
    concat!(
        include_str!("claim.sh"),
        "\n",
        include_str!("forget_secrets.sh")
    ),
);

/// A resumable job Slurm has just requeued: its begin time moved forward, and how its
/// segment ended (the segments file's last line).
pub(crate) const CONTINUE_SEGMENT: Script =
    Script::new("continue-segment", include_str!("continue_segment.sh"));

/// Continue a resumable run as a fresh job, once per restart (a marker in its job
/// folder): the segments file's last line, `--`, then sbatch's answer.
pub(crate) const CONTINUE_FRESH: Script =
    Script::new("continue-fresh", include_str!("continue_fresh.sh"))
        .with_exits(ContinueFreshExit::VARS);

/// The last lines of several log files, concatenated.
pub(crate) const TAIL_LOGS: Script = Script::new("tail-logs", include_str!("tail_logs.sh"));

/// A log file's size, then at most a given number of its bytes from an offset
/// (following a log in bounded chunks).
pub(crate) const READ_FROM: Script =
    Script::new("read-from", include_str!("read_from.sh")).with_exits(ReadFromExit::VARS);

/// The scheduler tools that are not on PATH.
pub(crate) const MISSING_TOOLS: Script =
    Script::new("missing-tools", include_str!("missing_tools.sh"));

/// Make the results root, check it is writable, print it.
pub(crate) const RESULTS_ROOT: Script =
    Script::new("results-root", include_str!("results_root.sh"));

/// Whether enroot is on PATH, and which credential machines have no line.
pub(crate) const ENROOT: Script = Script::new("enroot", include_str!("enroot.sh"));

/// The cluster's `ClusterName`, its controller's release and the login node's client's
/// (read by [`parse_cluster_config`](crate::slurm::parse::parse_cluster_config)).
pub(crate) const CLUSTER_CONFIG: Script =
    Script::new("cluster-config", include_str!("cluster_config.sh"));

/// The paths that do not exist.
pub(crate) const MISSING_PATHS: Script =
    Script::new("missing-paths", include_str!("missing_paths.sh"));

/// Why jobs wait: squeue of the jobs (ids on standard input), the nodes by state of
/// their partitions, the jobs ahead of each, and the limits that hold them, framed.
pub(crate) const WHY: Script = framed(Script::new("why", include_str!("why.sh")));

/// `sbatch --test-only` of one batch script per partition (the scripts on standard
/// input, NUL-separated), framed: where and when a job would start, submitting nothing.
pub(crate) const FORECAST: Script = framed(Script::new("forecast", include_str!("forecast.sh")));

/// Every script of the SLURM backend.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn all() -> [Script; 21] {
    [
        CONTINUE_FRESH,
        CONTINUE_SEGMENT,
        CODE_MISSING,
        CODE_PUT,
        SUBMIT,
        CONVERT_IMAGE,
        CONVERT_JOB,
        CHECK_SQSH,
        CREDENTIALS,
        POLL,
        SETTLE,
        FORGET_SECRETS,
        TAIL_LOGS,
        READ_FROM,
        MISSING_TOOLS,
        RESULTS_ROOT,
        ENROOT,
        CLUSTER_CONFIG,
        MISSING_PATHS,
        WHY,
        FORECAST,
    ]
}

#[cfg(test)]
mod library_tests;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_passes_bash_n_with_its_prelude() {
        for script in all() {
            crate::testing::assert_bash_n(script.name, &script.full_text());
        }
    }

    #[test]
    fn every_exit_variable_a_script_uses_is_named_in_its_prelude() {
        let used = regex::Regex::new(r#"exit "\$(EXIT_[A-Z_]+)""#).unwrap();
        for script in all() {
            let text = script.full_text();
            for found in used.captures_iter(script.text) {
                let name = &found[1];
                assert!(
                    text.contains(&format!("readonly {name}=")),
                    "{}: exit status {name} is used but not named",
                    script.name
                );
            }
        }
        assert!(SUBMIT
            .full_text()
            .contains("readonly EXIT_CHECKSUM_MISMATCH=65\n"));
        assert_eq!(SubmitExit::from_status(66), Some(SubmitExit::ImageMissing));
    }
}
