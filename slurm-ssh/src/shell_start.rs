//! The long-lived remote shell's set-up script (`shell_start.sh`) and its exit statuses, named once.

use slurm_core::exit_statuses;
use slurm_core::Script;

exit_statuses! {
    /// How the long-lived shell ([`SHELL_START`]) gives up and exits; the transport
    /// then opens another shell.
    pub(crate) enum ShellExit {
        /// A command's input could not be stored in its file (a full `/tmp`): the shell
        /// refused the command and exits before it reads another byte, so no byte of
        /// the input is ever read as shell input.
        InputUnwritable = 95 => "EXIT_SHELL_INPUT_UNWRITABLE",
        /// The shell cannot enter the user's home folder.
        NoHome = 96 => "EXIT_SHELL_NO_HOME",
        /// The private temporary folder (or its frame folders) could not be made.
        NoTempDir = 97 => "EXIT_SHELL_NO_TEMP_DIR",
        /// `head`, which reads each command's input, is not on PATH.
        NoHead = 98 => "EXIT_SHELL_NO_HEAD",
    }
}

/// The set-up a new shell runs once, before the kills of earlier shells' orphans and
/// the ready line: a private temporary folder (umask 077; the user's umask kept for
/// the commands), job control, and the functions `__sr_frames`, `__sr_kill` and
/// `__sr_run` (see [`crate::framing`] for the protocol).
pub(crate) const SHELL_START: Script =
    Script::new("shell-start", SHELL_START_TEXT).with_exits(ShellExit::VARS);

/// The text of `shell_start.sh`.
const SHELL_START_TEXT: &str = include_str!("shell_start.sh");

/// Every remote script of this crate, for the lint tests (`bash -n`, shellcheck).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn all() -> [Script; 1] {
    [SHELL_START]
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::process::Stdio;

    use super::*;

    #[test]
    fn every_script_passes_bash_n_with_its_prelude() {
        for script in all() {
            slurm_core::testing::assert_bash_n(script.name(), &script.full_text());
        }
    }

    #[test]
    fn every_exit_status_used_is_named_once_and_every_named_one_is_used() {
        let text = SHELL_START.full_text();
        // The variable of every `exit "$NAME"` of the script.
        let mut used: Vec<&str> = SHELL_START_TEXT
            .match_indices("exit \"$")
            .map(|(at, found)| {
                let rest = &SHELL_START_TEXT[at + found.len()..];
                &rest[..rest.find('"').expect("a closing quote")]
            })
            .collect();
        used.sort_unstable();
        used.dedup();
        let mut named: Vec<&str> = ShellExit::VARS.iter().map(|(name, _)| *name).collect();
        named.sort_unstable();
        assert_eq!(used, named);
        for (name, status) in ShellExit::VARS {
            assert!(
                text.contains(&format!("readonly {name}={status}\n")),
                "{name}"
            );
        }
        assert!(
            !SHELL_START_TEXT.lines().any(|l| l.contains("exit 9")),
            "a bare exit status"
        );
        assert_eq!(ShellExit::from_status(97), Some(ShellExit::NoTempDir));
    }

    #[test]
    fn a_shell_without_a_temporary_folder_exits_with_its_named_status() {
        let mut bash = std::process::Command::new("bash")
            .args(["--noprofile", "--norc"])
            .env("TMPDIR", "/nonexistent/slurm-run-test")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bash");
        let mut stdin = bash.stdin.take().expect("piped stdin");
        stdin
            .write_all(SHELL_START.full_text().as_bytes())
            .expect("write the set-up");
        drop(stdin);
        let status = bash.wait().expect("bash ends");
        assert_eq!(status.code(), Some(ShellExit::NoTempDir.status()));
    }
}
