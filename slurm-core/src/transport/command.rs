//! A typed remote command (program, arguments, standard input, deadline) and what it produced.

use std::fmt;
use std::time::Duration;

use super::shell_quote;
use crate::{Error, Result};

/// The default deadline of a command that does not set one.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// A command to run: a program and its arguments (never a pre-joined string),
/// optional bytes for its standard input, and a deadline.
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    program: String,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    redacted_display: Option<String>,
    /// For a command marked a fixed script: the function name of its text.
    fixed_script: Option<String>,
}

/// A command that runs one of slurm-run's fixed scripts ([`Command::fixed_script`]):
/// `bash -c TEXT NAME PARAMS...`, in the parts a long-lived shell needs.
#[derive(Debug, Clone, Copy)]
pub struct FixedScript<'a> {
    /// The whole script text (prelude, library and script).
    pub text: &'a str,
    /// The name of the shell function that holds `text`: `__sr_s_` and the first 128
    /// bits of its SHA-256 in hex, so an edited script is another function. Computed
    /// once, when the command is marked.
    pub function: &'a str,
    /// Its positional parameters.
    pub params: &'a [String],
}

/// The function name of the fixed script `text` (see [`FixedScript::function`]).
fn script_function(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("__sr_s_{hex}")
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
            fixed_script: None,
        }
    }

    /// A command that runs a fixed bash script with the given values as its positional
    /// parameters (`$1`, `$2`, ...). User values only ever travel as positional
    /// parameters, never spliced into the script text. (slurm-run's own scripts are
    /// `.sh` files run the same way, with their exit statuses named.)
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

    /// Mark a `bash -c TEXT NAME PARAMS...` command whose TEXT is one of a few fixed
    /// scripts (slurm-run's own, [`Script::command`](super::Script::command)). A
    /// transport with a long-lived shell may then define TEXT once in that shell, as a
    /// function, and run it in a subshell of its own with PARAMS: no new bash, no parse.
    /// So TEXT must hold there as under `bash -c`: it names no `$0` and no `$$` (a
    /// subshell's own pid is `$BASHPID`), and no option it sets changes how its own text
    /// parses (`shopt -s extglob`). Any other command is left as it is.
    pub fn as_fixed_script(mut self) -> Self {
        let shaped = self.program == "bash" && self.args.len() >= 3 && self.args[0] == "-c";
        self.fixed_script = shaped.then(|| script_function(&self.args[1]));
        self
    }

    /// The parts of a command marked [`as_fixed_script`](Command::as_fixed_script).
    pub fn fixed_script(&self) -> Option<FixedScript<'_>> {
        let function = self.fixed_script.as_deref()?;
        Some(FixedScript {
            text: &self.args[1],
            function,
            params: &self.args[3..],
        })
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

    /// The deadline, or the default of 120 s.
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
