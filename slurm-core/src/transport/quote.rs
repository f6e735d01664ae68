//! The one shell-quoting function of slurm-run.

use crate::{Error, Result};

/// Quote one argument for a POSIX shell, so that it reaches the program as exactly
/// this single argument whatever bytes it holds (quotes, `$()`, backticks, newlines,
/// spaces, unicode). This is the only function in slurm-run that quotes for a shell;
/// the quoting itself is the `shlex` crate's.
///
/// Fails only for a NUL byte, which no argument can carry.
///
/// ```
/// use slurm_core::shell_quote;
/// assert_eq!(shell_quote("plain").unwrap(), "plain");
/// assert_eq!(shell_quote("").unwrap(), "''");
/// assert_ne!(shell_quote("it's $(here)").unwrap(), "it's $(here)");
/// ```
pub fn shell_quote(arg: &str) -> Result<String> {
    shlex::try_quote(arg)
        .map(|quoted| quoted.into_owned())
        .map_err(|_| {
            Error::invalid(
                "command argument",
                "an argument cannot contain a NUL byte; remove it",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(shell_quote("abc-1.2/x:y@z").unwrap(), "abc-1.2/x:y@z");
        assert_eq!(shell_quote("").unwrap(), "''");
        assert_ne!(shell_quote("a b").unwrap(), "a b");
        assert!(shell_quote("a\0b").is_err());
    }

    /// What a real bash makes of `printf '%s\0' WORDS`, split at the NULs.
    fn bash_words(words: &[String]) -> Vec<String> {
        let line = format!("printf '%s\\0' {}", words.join(" "));
        let out = std::process::Command::new("bash")
            .arg("--noprofile")
            .arg("--norc")
            .arg("-c")
            .arg(line)
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut items: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .map(|w| String::from_utf8(w.to_vec()).expect("utf-8 back"))
            .collect();
        assert_eq!(items.pop().as_deref(), Some(""), "output ends with a NUL");
        items
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any string without NUL reaches a real bash as exactly that one argument.
        #[test]
        fn quoted_words_round_trip_through_bash(
            a in "[^\\x00]{0,40}",
            b in "(['\"$`\\\\ \n\t*?~!#;&|(){}<>-]|[a-z]|\\PC){0,24}",
        ) {
            let words = [shell_quote(&a).unwrap(), shell_quote(&b).unwrap()];
            proptest::prop_assert_eq!(bash_words(&words), vec![a, b]);
        }
    }

    #[test]
    fn hostile_strings_round_trip_through_bash() {
        let hostile = [
            "",
            "'",
            "\"'\"",
            "$(id)",
            "`id`",
            "a\nb",
            "\\",
            "*",
            "~",
            "-n",
            "日本 ✓",
            "'$HOME'",
        ];
        let words: Vec<String> = hostile.iter().map(|s| shell_quote(s).unwrap()).collect();
        assert_eq!(bash_words(&words), hostile);
    }
}
