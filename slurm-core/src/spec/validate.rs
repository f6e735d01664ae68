//! Validation of the names and values a spec holds: safe names, shell names, partitions, memory, sbatch options.

use crate::names::{short, validate_safe_name};
use crate::{Error, Result};

/// Whether an sbatch option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    /// A flag (`--overcommit`).
    No,
    /// A value is required (`--qos=high`).
    Required,
    /// A value may follow `=` (`--exclusive`, `--exclusive=user`).
    Optional,
}

/// sbatch's long options (Slurm 22.05 and later), with their short forms, so that an
/// abbreviation (`--outp`) or a short form (`-o/path`, `-Jx`) is read as sbatch reads it.
const SBATCH_OPTIONS: &[(&str, Option<char>, Arg)] = &[
    ("account", Some('A'), Arg::Required),
    ("acctg-freq", None, Arg::Required),
    ("array", Some('a'), Arg::Required),
    ("batch", None, Arg::Required),
    ("bb", None, Arg::Required),
    ("bbf", None, Arg::Required),
    ("begin", Some('b'), Arg::Required),
    ("chdir", Some('D'), Arg::Required),
    ("cluster-constraint", None, Arg::Required),
    ("clusters", Some('M'), Arg::Required),
    ("comment", None, Arg::Required),
    ("constraint", Some('C'), Arg::Required),
    ("container", None, Arg::Required),
    ("contiguous", None, Arg::No),
    ("core-spec", Some('S'), Arg::Required),
    ("cores-per-socket", None, Arg::Required),
    ("cpu-freq", None, Arg::Required),
    ("cpus-per-gpu", None, Arg::Required),
    ("cpus-per-task", Some('c'), Arg::Required),
    ("deadline", None, Arg::Required),
    ("delay-boot", None, Arg::Required),
    ("dependency", Some('d'), Arg::Required),
    ("distribution", Some('m'), Arg::Required),
    ("error", Some('e'), Arg::Required),
    ("exclude", Some('x'), Arg::Required),
    ("exclusive", None, Arg::Optional),
    ("export", None, Arg::Required),
    ("export-file", None, Arg::Required),
    ("extra-node-info", Some('B'), Arg::Required),
    ("get-user-env", None, Arg::Optional),
    ("gid", None, Arg::Required),
    ("gpu-bind", None, Arg::Required),
    ("gpu-freq", None, Arg::Required),
    ("gpus", Some('G'), Arg::Required),
    ("gpus-per-node", None, Arg::Required),
    ("gpus-per-socket", None, Arg::Required),
    ("gpus-per-task", None, Arg::Required),
    ("gres", None, Arg::Required),
    ("gres-flags", None, Arg::Required),
    ("help", Some('h'), Arg::No),
    ("hint", None, Arg::Required),
    ("hold", Some('H'), Arg::No),
    ("ignore-pbs", None, Arg::No),
    ("input", Some('i'), Arg::Required),
    ("job-name", Some('J'), Arg::Required),
    ("kill-on-invalid-dep", None, Arg::Required),
    ("licenses", Some('L'), Arg::Required),
    ("mail-type", None, Arg::Required),
    ("mail-user", None, Arg::Required),
    ("mcs-label", None, Arg::Required),
    ("mem", None, Arg::Required),
    ("mem-bind", None, Arg::Required),
    ("mem-per-cpu", None, Arg::Required),
    ("mem-per-gpu", None, Arg::Required),
    ("mincpus", None, Arg::Required),
    ("network", None, Arg::Required),
    ("nice", None, Arg::Optional),
    ("no-kill", Some('k'), Arg::Optional),
    ("no-requeue", None, Arg::No),
    ("nodefile", Some('F'), Arg::Required),
    ("nodelist", Some('w'), Arg::Required),
    ("nodes", Some('N'), Arg::Required),
    ("ntasks", Some('n'), Arg::Required),
    ("ntasks-per-core", None, Arg::Required),
    ("ntasks-per-gpu", None, Arg::Required),
    ("ntasks-per-node", None, Arg::Required),
    ("ntasks-per-socket", None, Arg::Required),
    ("open-mode", None, Arg::Required),
    ("output", Some('o'), Arg::Required),
    ("overcommit", Some('O'), Arg::No),
    ("oversubscribe", Some('s'), Arg::No),
    ("parsable", None, Arg::No),
    ("partition", Some('p'), Arg::Required),
    ("power", None, Arg::Required),
    ("prefer", None, Arg::Required),
    ("priority", None, Arg::Required),
    ("profile", None, Arg::Required),
    ("propagate", None, Arg::Optional),
    ("qos", Some('q'), Arg::Required),
    ("quiet", Some('Q'), Arg::No),
    ("reboot", None, Arg::No),
    ("requeue", None, Arg::No),
    ("reservation", None, Arg::Required),
    ("signal", None, Arg::Required),
    ("sockets-per-node", None, Arg::Required),
    ("spread-job", None, Arg::No),
    ("switches", None, Arg::Required),
    ("test-only", None, Arg::No),
    ("thread-spec", None, Arg::Required),
    ("threads-per-core", None, Arg::Required),
    ("time", Some('t'), Arg::Required),
    ("time-min", None, Arg::Required),
    ("tmp", None, Arg::Required),
    ("tres-per-task", None, Arg::Required),
    ("uid", None, Arg::Required),
    ("usage", Some('u'), Arg::No),
    ("use-min-nodes", None, Arg::No),
    ("verbose", Some('v'), Arg::No),
    ("version", Some('V'), Arg::No),
    ("wait", Some('W'), Arg::No),
    ("wait-all-nodes", None, Arg::Required),
    ("wckey", None, Arg::Required),
    ("wrap", None, Arg::Required),
];

/// The options an `extra_sbatch` entry may not set, by sbatch's long name, and why.
const RESERVED_SBATCH: &[(&str, &str)] = &[
    ("job-name", "slurm-run sets it: the job name is the record id (how a lost submit is found again)"),
    ("output", "slurm-run sets it: the log layout (logs/<id>-<slurm id>/) is how logs are found"),
    ("error", "slurm-run sets it: the log layout (logs/<id>-<slurm id>/) is how logs are found"),
    ("open-mode", "slurm-run sets it with the log layout"),
    ("parsable", "slurm-run runs sbatch --parsable itself"),
    ("wrap", "the spec's `command` is the job's command"),
    ("array", "job arrays are not taken as a raw sbatch option (one record follows one job); use the spec's own array key once it exists, or submit one job per task"),
    ("hold", "a held job never starts and its record would wait forever; to start later, use --begin=<time>"),
    ("chdir", "slurm-run runs the job in its job folder, where its spec, script and files are; remove it (the command may cd itself)"),
    ("wait", "sbatch --wait would hold the submit until the job ends"),
    ("test-only", "sbatch --test-only submits nothing; run preflight instead"),
    ("clusters", "a job sent to another cluster could not be found again by its name; set the cluster of the login node instead"),
    ("usage", "sbatch --usage submits nothing"),
    ("help", "sbatch --help submits nothing"),
    ("version", "sbatch --version submits nothing"),
    ("requeue", "set it with the spec's `requeue` key"),
    ("no-requeue", "set it with the spec's `requeue` key"),
    ("nodes", "set it with the spec's `nodes` key"),
    ("ntasks", "slurm-run runs one task per node; set `nodes` instead"),
    ("ntasks-per-node", "slurm-run runs one task per node"),
    ("time", "set it with the spec's `time` key (checked against the partition's MaxTime)"),
    ("partition", "set it with the spec's `partition` key (checked by preflight)"),
    ("account", "set it with the spec's `account` key"),
    ("cpus-per-task", "set it with the spec's `cpus_per_task` key"),
    ("mem", "set it with the spec's `memory` key"),
    ("gres", "set GPUs with the spec's `gpus_per_node` or `gpus` key"),
    ("gpus", "set GPUs with the spec's `gpus_per_node` or `gpus` key"),
    ("gpus-per-node", "set GPUs with the spec's `gpus_per_node` key"),
    ("dependency", "slurm-run writes it from `after` (the spec's key, or --after) and the NCCL probe the job waits for; an entry here would drop them and start the job early"),
    ("kill-on-invalid-dep", "slurm-run writes it with the dependency (a dependant that can never run is ended and cancelled by the poll)"),
    ("nodelist", "it would pin the job to nodes a retry excludes after a node fault; use --exclude (merged with those) or --constraint"),
];

pub(crate) fn first_duplicate(items: &[String]) -> Option<&str> {
    let mut seen = std::collections::BTreeSet::new();
    items
        .iter()
        .find(|i| !seen.insert(i.as_str()))
        .map(String::as_str)
}

/// A partition or a comma list of partitions (`polar,polar3`).
pub(crate) fn validate_partition(p: &str) -> Result<()> {
    for part in p.split(',') {
        validate_safe_name("partition", part.trim()).map_err(|_| {
            Error::invalid(
                "partition",
                format!("`{p}` is not a partition name or comma list of names"),
            )
        })?;
    }
    Ok(())
}

/// Slurm memory: digits with an optional K/M/G/T suffix.
pub(crate) fn validate_memory(mem: &str) -> Result<()> {
    let digits = mem.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
    let ok = !digits.is_empty()
        && digits.len() + 1 >= mem.len()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.len() <= 12;
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "memory",
            format!("`{mem}` is not a Slurm memory size; write e.g. 64G or 7200M"),
        ))
    }
}

/// Check one `extra_sbatch` entry: a single-line option such as `--qos=high`, not one
/// slurm-run sets itself, one the spec has a key for, or one that breaks what slurm-run
/// relies on. The entry is read as sbatch reads it (`-o/path` and `--outp=/path` are
/// `--output=/path`), so a short form or an abbreviation cannot slip past.
pub fn validate_sbatch_line(line: &str) -> Result<()> {
    normalise_sbatch_line(line).map(|_| ())
}

/// One `extra_sbatch` entry as sbatch would read it, in its long form: `-o/path`,
/// `-o /path`, `--outp=/path` and `--output /path` all read as `--output=/path`, so a
/// short form or an abbreviation cannot slip past the reserved options. Refused: an
/// option slurm-run sets (job name, logs, `--parsable`, `--wrap`), one the spec has a
/// key for (`--time`, `--nodes`, `--partition`, ...), one that breaks what slurm-run
/// relies on (`--array`, `--hold`, `--chdir`, `--wait`, `--clusters`, ...), an
/// ambiguous abbreviation, several options in one entry, and control characters.
/// An option sbatch does not list is kept as written unless it could abbreviate a
/// reserved one.
pub(crate) fn normalise_sbatch_line(line: &str) -> Result<String> {
    let bad = |message: String| Error::invalid("extra_sbatch", message);
    if line.chars().any(char::is_control) {
        return Err(bad(
            "an entry holds a newline or control character, which would break out of its #SBATCH line; write one option per entry".to_string(),
        ));
    }
    let t = line.trim();
    if !t.starts_with('-') || t == "-" || t == "--" {
        return Err(bad(format!(
            "`{}`: write one sbatch option per entry, e.g. --qos=high (no #SBATCH prefix)",
            short(t)
        )));
    }
    let (long, arg, value) = if let Some(rest) = t.strip_prefix("--") {
        let (name, value) = match rest.find(['=', ' ', '\t']) {
            Some(at) if rest[at..].starts_with('=') => {
                (&rest[..at], Some(rest[at + 1..].to_string()))
            }
            Some(at) => (&rest[..at], Some(rest[at..].trim().to_string())),
            None => (rest, None),
        };
        match resolve_long(name)? {
            Some((long, arg)) => (long, arg, value),
            None => {
                // Not an option sbatch lists: kept as written, unless it could be an
                // abbreviation of a reserved one.
                if let Some((reserved, why)) =
                    RESERVED_SBATCH.iter().find(|(r, _)| r.starts_with(name))
                {
                    return Err(bad(format!(
                        "`--{name}` could abbreviate --{reserved}: {why}"
                    )));
                }
                return Ok(t.to_string());
            }
        }
    } else {
        let mut chars = t[1..].chars();
        let letter = chars.next().unwrap_or('-');
        let rest = chars.as_str();
        let Some((long, _, arg)) = SBATCH_OPTIONS.iter().find(|(_, s, _)| *s == Some(letter))
        else {
            return Err(bad(format!(
                "`{}`: -{letter} is not an sbatch option slurm-run knows; write the long form (--name=value)",
                short(t)
            )));
        };
        let value = match (arg, rest.trim()) {
            (_, "") => None,
            (Arg::No, _) => {
                return Err(bad(format!(
                    "`{}`: write one option per entry (-{letter} takes no value)",
                    short(t)
                )))
            }
            (_, value) => Some(value.to_string()),
        };
        (*long, *arg, value)
    };
    if let Some((_, why)) = RESERVED_SBATCH.iter().find(|(r, _)| *r == long) {
        return Err(bad(format!("`{}` (--{long}): {why}; remove it", short(t))));
    }
    match (arg, value) {
        (Arg::No, Some(_)) => Err(bad(format!(
            "`{}`: --{long} takes no value; write one option per entry",
            short(t)
        ))),
        (Arg::Required, None) => Err(bad(format!(
            "`{}`: --{long} needs a value, e.g. --{long}=VALUE",
            short(t)
        ))),
        (_, Some(value)) if value.is_empty() => Err(bad(format!(
            "`{}`: --{long} needs a value, e.g. --{long}=VALUE",
            short(t)
        ))),
        (_, Some(value)) => Ok(format!("--{long}={value}")),
        (_, None) => Ok(format!("--{long}")),
    }
}

/// sbatch's long option for `name`, as getopt reads it: the exact name, else the one
/// option it abbreviates; `None` when no option starts with it; an error when several do.
fn resolve_long(name: &str) -> Result<Option<(&'static str, Arg)>> {
    if name.is_empty() {
        return Ok(None);
    }
    if let Some((long, _, arg)) = SBATCH_OPTIONS.iter().find(|(l, _, _)| *l == name) {
        return Ok(Some((long, *arg)));
    }
    let matches: Vec<&(&str, Option<char>, Arg)> = SBATCH_OPTIONS
        .iter()
        .filter(|(l, _, _)| l.starts_with(name))
        .collect();
    match matches.as_slice() {
        [] => Ok(None),
        [(long, _, arg)] => Ok(Some((long, *arg))),
        several => Err(Error::invalid(
            "extra_sbatch",
            format!(
                "`--{name}` is an ambiguous abbreviation ({}); write the option in full",
                several
                    .iter()
                    .map(|(l, _, _)| format!("--{l}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_forms_and_abbreviations_cannot_reach_a_reserved_option() {
        for entry in [
            "-o/path",
            "-o /path",
            "--outp=/tmp/x",
            "--output /tmp/x",
            "-Jx",
            "-J x",
            "--job=x",
            "-e/tmp/e",
            "--err=/tmp/e",
            "--open=append",
            "--pars",
            "--wra=true",
            "-D/tmp",
            "--chdir=/tmp",
            "--ch=/tmp",
            "-H",
            "--hold",
            "--ho",
            "-a1-4",
            "--array=1-4",
            "--arr=0-9",
            "-W",
            "--wait",
            "--test",
            "-Mother",
            "--time=10",
            "-t10",
            "-N2",
            "-pgpu",
            "--requeue",
            "--no-req",
        ] {
            let err = normalise_sbatch_line(entry).expect_err(entry);
            assert_eq!(err.kind(), crate::ErrorKind::Invalid, "{entry}");
        }
        let array = normalise_sbatch_line("--array=0-9")
            .unwrap_err()
            .to_string();
        assert!(array.contains("array key"), "{array}");
        let hold = normalise_sbatch_line("-H").unwrap_err().to_string();
        assert!(hold.contains("--begin"), "{hold}");
    }

    #[test]
    fn ordinary_options_come_out_in_their_long_form() {
        for (entry, normal) in [
            ("--qos=high", "--qos=high"),
            ("-q high", "--qos=high"),
            ("-qhigh", "--qos=high"),
            ("--qo=high", "--qos=high"),
            ("--exclude=n3", "--exclude=n3"),
            ("-x n3", "--exclude=n3"),
            ("--constraint=a100", "--constraint=a100"),
            ("--exclusive", "--exclusive"),
            ("--exclusive=user", "--exclusive=user"),
            ("--begin=now+1hour", "--begin=now+1hour"),
            ("--reservation=big run", "--reservation=big run"),
            ("--some-future-option=1", "--some-future-option=1"),
        ] {
            assert_eq!(normalise_sbatch_line(entry).unwrap(), normal, "{entry}");
        }
        // An abbreviation that fits several options is sbatch's error too.
        let err = normalise_sbatch_line("--mem-per=4G")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ambiguous"), "{err}");
        assert!(normalise_sbatch_line("-Z").is_err());
        assert!(
            normalise_sbatch_line("-Ov").is_err(),
            "one option per entry"
        );
    }
}
