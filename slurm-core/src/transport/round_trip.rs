//! Several commands in one round trip, and the one framing that keeps their answers
//! apart: each command's exit status, stdout and stderr come back separately.
//!
//! Round trips are the currency of a remote backend: a poll of any number of jobs,
//! a preflight of a dozen checks, a reconcile by job name, each is one [`Command`].
//! [`join`] runs typed argv lists in turn (they travel as positional parameters of a
//! fixed script, so they are quoted once, by the transport); a script of its own that
//! runs several commands (made with `framed`) frames each with the same `part` function
//! (`frame.sh`). [`split`] reads either back.

use super::script::{exit_statuses, Script};
use crate::transport::{Command, Output};
use crate::{Error, Result};

/// The framing functions (`part N CMD ARGS...`), prepended to framed scripts.
pub(crate) const FRAME_SH: &str = include_str!("frame.sh");

exit_statuses! {
    /// Exit statuses of the framing itself.
    pub(crate) enum FrameExit {
        /// No temporary folder for the parts' output could be made.
        NoTempDir = 70 => "EXIT_NO_TEMP_DIR",
    }
}

/// Separates one argv from the next among the script's positional parameters.
const SEPARATOR: &str = "--slurm-run-next--";

/// `script` with the framing functions (`part N CMD ARGS...`) prepended: each part's
/// answer comes back framed, for [`split`].
pub(crate) const fn framed(script: Script) -> Script {
    script.with_library(FRAME_SH, FrameExit::VARS)
}

/// Runs each argv of its parameters in turn, framed.
pub(crate) const ROUND_TRIP: Script =
    framed(Script::new("round-trip", include_str!("round_trip.sh")));

/// One command that runs every command of `commands` in order, on the remote side,
/// in one round trip. Standard input and timeouts of the parts are ignored: give the
/// whole round trip a timeout with [`Command::timeout`].
pub fn join(commands: &[Command]) -> Command {
    let mut params: Vec<String> = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        if i > 0 {
            params.push(SEPARATOR.to_string());
        }
        params.push(command.program().to_string());
        params.extend(command.get_args().iter().cloned());
    }
    let label = format!(
        "round trip of {}: {}",
        commands.len(),
        commands
            .iter()
            .map(|c| c.program().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    ROUND_TRIP.command(params).display_as(label)
}

/// Split the output of a round trip of `count` framed commands ([`join`], or a framed
/// script) into one [`Output`] per command. A round trip cut short (the connection dropped, the shell died) is a parse error naming
/// how far it got.
pub fn split(output: &Output, count: usize) -> Result<Vec<Output>> {
    let text = String::from_utf8_lossy(&output.stdout);
    let mut parts: Vec<Output> = Vec::with_capacity(count);
    let mut current: Option<Output> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("@@begin ") {
            if current.is_some() || rest.trim() != parts.len().to_string() {
                return Err(Error::parse(
                    "round-trip output",
                    format!("unexpected `{line}`"),
                ));
            }
            current = Some(Output::default());
        } else if let Some(rest) = line.strip_prefix("@@end ") {
            let mut part = current
                .take()
                .ok_or_else(|| Error::parse("round-trip output", "`@@end` without `@@begin`"))?;
            let mut fields = rest.split_whitespace();
            let index = fields.next().unwrap_or_default();
            if index != parts.len().to_string() {
                return Err(Error::parse(
                    "round-trip output",
                    format!("unexpected `{line}`"),
                ));
            }
            part.status = fields.next().and_then(|s| s.parse().ok()).ok_or_else(|| {
                Error::parse("round-trip output", format!("no status in `{line}`"))
            })?;
            parts.push(part);
        } else if let Some(part) = current.as_mut() {
            if let Some(out) = line
                .strip_prefix("O ")
                .or(line.strip_prefix("O").filter(|s| s.is_empty()))
            {
                part.stdout.extend_from_slice(out.as_bytes());
                part.stdout.push(b'\n');
            } else if let Some(err) = line
                .strip_prefix("E ")
                .or(line.strip_prefix("E").filter(|s| s.is_empty()))
            {
                part.stderr.extend_from_slice(err.as_bytes());
                part.stderr.push(b'\n');
            } else {
                return Err(Error::parse(
                    "round-trip output",
                    format!("unframed line `{line}`"),
                ));
            }
        }
        // Lines outside any part (nothing should print there) are ignored.
    }
    if parts.len() != count {
        return Err(Error::parse(
            "round-trip output",
            format!(
                "the round trip stopped after {} of {count} commands (status {}): {}",
                parts.len(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{LocalTransport, Transport};

    #[tokio::test]
    async fn runs_each_command_and_keeps_streams_apart() {
        let commands = vec![
            Command::new("printf").arg("a b\n'c'\n"),
            Command::new("bash").arg("-c").arg("echo oops >&2; exit 3"),
            Command::new("cat"),
            Command::new("printf").arg("%s").arg("no newline $(x)"),
        ];
        let output = LocalTransport::new().run(&join(&commands)).await.unwrap();
        let parts = split(&output, commands.len()).unwrap();
        assert_eq!(parts[0].stdout, b"a b\n'c'\n");
        assert_eq!(parts[0].status, 0);
        assert_eq!(parts[1].status, 3);
        assert_eq!(parts[1].stderr, b"oops\n");
        assert!(parts[1].stdout.is_empty());
        assert!(parts[2].stdout.is_empty(), "sub-commands read no stdin");
        assert_eq!(parts[3].stdout, b"no newline $(x)\n");
    }

    #[tokio::test]
    async fn short_and_long_outputs_come_back_as_written() {
        // Up to 2000 lines bash joins the prefixed lines; above, awk prefixes them: both
        // keep empty lines, odd characters and a last line without a newline (given one).
        let lines = |n: usize| -> String {
            (0..n)
                .map(|i| match i % 4 {
                    0 => format!("é{i}"),
                    1 => format!("line {i} %s \\n $HOME"),
                    2 => String::new(),
                    _ => format!("  tab\there {i}"),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        for n in [1, 3, 2000, 2001, 10_000] {
            let text = lines(n);
            let commands = vec![
                Command::new("printf").arg("%s").arg(&text),
                Command::new("bash")
                    .arg("-c")
                    .arg("printf '%s' \"$1\" >&2")
                    .arg("err")
                    .arg(&text),
            ];
            let output = LocalTransport::new().run(&join(&commands)).await.unwrap();
            let parts = split(&output, commands.len()).unwrap();
            let expected = if text.ends_with('\n') {
                text.clone()
            } else {
                format!("{text}\n")
            };
            assert_eq!(parts[0].stdout_text(), expected, "{n} lines");
            assert_eq!(parts[1].stderr_text(), expected, "{n} lines");
        }
    }

    #[test]
    fn a_truncated_round_trip_is_an_error() {
        let output = Output {
            status: 255,
            stdout: b"@@begin 0\nO x\n@@end 0 0\n@@begin 1\nO y\n".to_vec(),
            stderr: Vec::new(),
        };
        let err = split(&output, 2).unwrap_err();
        assert!(err.to_string().contains("after 1 of 2"), "{err}");
    }

    #[test]
    fn garbage_never_panics() {
        for text in [
            "",
            "@@end",
            "@@begin x",
            "@@end 0 z",
            "@@begin 0\n@@begin 0",
            "\u{0}",
        ] {
            let output = Output {
                status: 0,
                stdout: text.as_bytes().to_vec(),
                stderr: Vec::new(),
            };
            assert!(split(&output, 1).is_err(), "{text:?}");
        }
    }
}
