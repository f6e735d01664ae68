//! The `Transport` seam (where commands run), typed remote commands, the one shell-quoting function, and `LocalTransport`.

use std::fmt;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use crate::{Error, Result};

/// The default deadline of a command that does not set one.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// Quote one argument for a POSIX shell, so that it reaches the program as exactly
/// this single argument whatever bytes it holds (quotes, `$()`, backticks, newlines,
/// spaces, unicode). This is the only function in slurm-run that quotes for a shell.
///
/// Fails only for a NUL byte, which no argument can carry.
///
/// ```
/// use slurm_core::transport::shell_quote;
/// assert_eq!(shell_quote("plain").unwrap(), "plain");
/// assert_eq!(shell_quote("it's $(here)").unwrap(), r#"'it'"'"'s $(here)'"#);
/// ```
pub fn shell_quote(arg: &str) -> Result<String> {
    if arg.is_empty() {
        return Ok("''".to_string());
    }
    if arg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return Ok(arg.to_string());
    }
    if arg.contains('\0') {
        return Err(Error::invalid(
            "command argument",
            "an argument cannot contain a NUL byte; remove it",
        ));
    }
    // Single quotes keep every byte literal; a single quote itself is closed,
    // written inside double quotes, and reopened.
    let mut quoted = String::with_capacity(arg.len() + 2);
    quoted.push('\'');
    for ch in arg.chars() {
        if ch == '\'' {
            quoted.push_str(r#"'"'"'"#);
        } else {
            quoted.push(ch);
        }
    }
    quoted.push('\'');
    Ok(quoted)
}

/// A command to run: a program and its arguments (never a pre-joined string),
/// optional bytes for its standard input, and a deadline.
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    program: String,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    redacted_display: Option<String>,
}

impl Command {
    /// A command running `program` with no arguments.
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            program: program.into(),
            args: Vec::new(),
            stdin: None,
            timeout: None,
            redacted_display: None,
        }
    }

    /// A command that runs a fixed bash script written by this library, with the
    /// given values as its positional parameters (`$1`, `$2`, ...). User values only
    /// ever travel as positional parameters, never spliced into the script text.
    pub fn bash_script<I, S>(script: &str, params: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("slurm-run")
            .args(params)
    }

    /// Append one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Append several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Bytes to feed the command's standard input (then closed). Without this the
    /// command reads an empty standard input.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// The deadline after which the command is abandoned and killed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// What to show for this command in logs and errors instead of its arguments.
    pub fn display_as(mut self, text: impl Into<String>) -> Self {
        self.redacted_display = Some(text.into());
        self
    }

    /// The program.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The arguments.
    pub fn get_args(&self) -> &[String] {
        &self.args
    }

    /// The standard input bytes, if any.
    pub fn stdin_bytes(&self) -> Option<&[u8]> {
        self.stdin.as_deref()
    }

    /// The deadline, or [`DEFAULT_COMMAND_TIMEOUT`].
    pub fn effective_timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_COMMAND_TIMEOUT)
    }

    /// The command as one shell line, each word quoted by [`shell_quote`].
    pub fn shell_line(&self) -> Result<String> {
        let mut line = shell_quote(&self.program)?;
        for arg in &self.args {
            line.push(' ');
            line.push_str(&shell_quote(arg)?);
        }
        Ok(line)
    }

    /// A short label for logs and errors: the program and, unless replaced by
    /// [`Command::display_as`], its first few arguments shortened. Never includes stdin.
    pub fn label(&self) -> String {
        if let Some(text) = &self.redacted_display {
            return text.clone();
        }
        let mut label = self.program.clone();
        if self.program == "bash" && self.args.first().map(String::as_str) == Some("-c") {
            label.push_str(" -c <script>");
            return label;
        }
        for arg in self.args.iter().take(4) {
            label.push(' ');
            let short: String = arg.chars().take(40).collect();
            label.push_str(&short);
        }
        if self.args.len() > 4 {
            label.push_str(" ...");
        }
        label
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("label", &self.label())
            .field("stdin_len", &self.stdin.as_ref().map(Vec::len))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// The exit status (128 + signal number when killed by a signal).
    pub status: i32,
    /// Standard output, byte for byte.
    pub stdout: Vec<u8>,
    /// Standard error, byte for byte.
    pub stderr: Vec<u8>,
}

impl Output {
    /// Whether the command exited 0.
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// Standard output as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// `Ok(self)` when the command exited 0, else an [`Error::Remote`] naming the command.
    pub fn check(self, command: &Command) -> Result<Self> {
        if self.success() {
            Ok(self)
        } else {
            let stderr: String = self.stderr_text().trim().chars().take(2000).collect();
            Err(Error::Remote {
                command: command.label(),
                status: self.status,
                stderr,
                transient: false,
            })
        }
    }
}

/// Where commands run: this host, or a login node over SSH.
///
/// Implementations must pass the conformance suite in `tests/`. Only [`Transport::run`]
/// is required; the file operations have default implementations built on it, which
/// a transport may replace with something faster.
#[async_trait]
pub trait Transport: Send + Sync + fmt::Debug {
    /// Run a command and return its output, whatever its exit status. Errors are for
    /// failures to run it at all (connection lost, deadline passed).
    async fn run(&self, command: &Command) -> Result<Output>;

    /// Write `contents` to `path`, created with `mode` (e.g. `0o600`): the file is
    /// written under a temporary name created with umask 077 and renamed into place,
    /// so it is never readable by others, even for an instant, and never half-written.
    async fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
        let command =
            Command::bash_script(WRITE_FILE_SCRIPT, [path.to_string(), format!("{mode:o}")])
                .stdin(contents.to_vec())
                .display_as(format!("write {path}"));
        self.run(&command).await?.check(&command).map(|_| ())
    }

    /// Read a whole file.
    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let command = Command::new("cat").arg("--").arg(path);
        let output = self.run(&command).await?;
        if output.success() {
            Ok(output.stdout)
        } else if output.stderr_text().contains("No such file") {
            Err(Error::NotFound(path.to_string()))
        } else {
            output.check(&command).map(|o| o.stdout)
        }
    }

    /// The last `lines` lines of a file.
    async fn tail_file(&self, path: &str, lines: usize) -> Result<Vec<u8>> {
        let command = Command::new("tail")
            .arg("-n")
            .arg(lines.to_string())
            .arg("--")
            .arg(path);
        let output = self.run(&command).await?;
        if output.success() {
            Ok(output.stdout)
        } else if output.stderr_text().contains("No such file") {
            Err(Error::NotFound(path.to_string()))
        } else {
            output.check(&command).map(|o| o.stdout)
        }
    }
}

/// The remote side of [`Transport::write_file`]: `$1` the path, `$2` the octal mode.
const WRITE_FILE_SCRIPT: &str = r#"set -e
umask 077
dir=$(dirname -- "$1")
tmp=$(mktemp -- "$dir/.slurm-run.XXXXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
chmod -- "$2" "$tmp"
mv -f -- "$tmp" "$1"
trap - EXIT"#;

#[async_trait]
impl<T: Transport + ?Sized> Transport for std::sync::Arc<T> {
    async fn run(&self, command: &Command) -> Result<Output> {
        (**self).run(command).await
    }
    async fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
        (**self).write_file(path, contents, mode).await
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        (**self).read_file(path).await
    }
    async fn tail_file(&self, path: &str, lines: usize) -> Result<Vec<u8>> {
        (**self).tail_file(path, lines).await
    }
}

#[async_trait]
impl<T: Transport + ?Sized> Transport for Box<T> {
    async fn run(&self, command: &Command) -> Result<Output> {
        (**self).run(command).await
    }
    async fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
        (**self).write_file(path, contents, mode).await
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        (**self).read_file(path).await
    }
    async fn tail_file(&self, path: &str, lines: usize) -> Result<Vec<u8>> {
        (**self).tail_file(path, lines).await
    }
}

/// Runs commands on this host, for code that already runs on the login node.
/// Programs are started directly (no shell), so arguments need no quoting.
#[derive(Debug, Clone, Default)]
pub struct LocalTransport {
    _private: (),
}

impl LocalTransport {
    /// A transport that runs commands on this host.
    pub fn new() -> Self {
        LocalTransport { _private: () }
    }
}

#[async_trait]
impl Transport for LocalTransport {
    async fn run(&self, command: &Command) -> Result<Output> {
        let mut child = tokio::process::Command::new(command.program())
            .args(command.get_args())
            .stdin(if command.stdin_bytes().is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::io(format!("start `{}`", command.label()), e))?;
        let stdin_task = match (child.stdin.take(), command.stdin_bytes()) {
            (Some(mut pipe), Some(bytes)) => {
                let bytes = bytes.to_vec();
                Some(tokio::spawn(async move {
                    // A command that exits without reading its input is not an error.
                    let _ = pipe.write_all(&bytes).await;
                    let _ = pipe.shutdown().await;
                }))
            }
            _ => None,
        };
        let deadline = command.effective_timeout();
        let waited = tokio::time::timeout(deadline, child.wait_with_output()).await;
        if let Some(task) = stdin_task {
            task.abort();
        }
        match waited {
            Ok(Ok(output)) => Ok(Output {
                status: exit_code(&output.status),
                stdout: output.stdout,
                stderr: output.stderr,
            }),
            Ok(Err(e)) => Err(Error::io(format!("wait for `{}`", command.label()), e)),
            Err(_) => Err(Error::Timeout {
                what: format!("`{}`", command.label()),
                after: deadline,
                may_have_run: true,
            }),
        }
    }
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(shell_quote("abc-1.2/x=y").unwrap(), "abc-1.2/x=y");
        assert_eq!(shell_quote("").unwrap(), "''");
        assert_eq!(shell_quote("a b").unwrap(), "'a b'");
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

    #[tokio::test]
    async fn local_transport_round_trips_argv() {
        let t = LocalTransport::new();
        let out = t
            .run(&Command::new("printf").arg("%s").arg("a'b $(x)"))
            .await
            .unwrap();
        assert_eq!(out.stdout, b"a'b $(x)");
    }
}
