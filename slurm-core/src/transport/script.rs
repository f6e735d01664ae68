//! The fixed bash scripts slurm-run runs on the remote side: their text lives in `.sh`
//! files, their exit statuses are named once ([`exit_statuses!`](crate::exit_statuses)),
//! and user values only ever reach them as positional parameters.
//!
//! Public so the transports of other crates (slurm-ssh's long-lived shell) keep their
//! remote shell text the same way: [`Script`] and `exit_statuses!`.

use super::Command;

/// One script of slurm-run's: its text (a `.sh` file included at build time), the
/// exit statuses it uses by name, and a library it needs (e.g. the round-trip framing's
/// `part` function, for scripts whose answer [`round_trip::split`](super::round_trip::split)
/// reads).
///
/// The script runs as `bash -c PRELUDE+TEXT NAME PARAMS...` ([`Script::command`],
/// marked [as a fixed script](super::Command::as_fixed_script): a long-lived shell
/// defines it once and runs it in a subshell), or
/// its [`full_text`](Script::full_text) is written to a shell that reads commands. The
/// prelude sets one read-only variable per named exit status (`EXIT_...=65`), so a
/// number lives in one place, the Rust table, and the script says `exit "$EXIT_..."`;
/// then comes the library's text, if any.
///
/// ```
/// use slurm_core::exit_statuses;
/// use slurm_core::Script;
///
/// exit_statuses! {
///     /// How the demo script fails.
///     pub enum DemoExit {
///         /// It always does.
///         Failed = 70 => "EXIT_FAILED",
///     }
/// }
///
/// const DEMO: Script = Script::new("demo", "exit \"$EXIT_FAILED\"\n").with_exits(DemoExit::VARS);
/// assert_eq!(DEMO.name(), "demo");
/// assert_eq!(DEMO.full_text(), "readonly EXIT_FAILED=70\nexit \"$EXIT_FAILED\"\n");
/// assert_eq!(DemoExit::from_status(70), Some(DemoExit::Failed));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// A short name, `$0` of the script, shown in logs and errors.
    pub(crate) name: &'static str,
    /// The script text.
    pub(crate) text: &'static str,
    /// The named exit statuses: (variable, status).
    pub(crate) exits: &'static [(&'static str, i32)],
    /// A library prepended to the text, and the exit statuses it names.
    pub(crate) library: Option<(&'static str, &'static [(&'static str, i32)])>,
}

impl Script {
    /// A script with no named exit statuses and no library.
    pub const fn new(name: &'static str, text: &'static str) -> Self {
        Script {
            name,
            text,
            exits: &[],
            library: None,
        }
    }

    /// With these named exit statuses (an `exit_statuses!` enum's `VARS`).
    pub const fn with_exits(mut self, exits: &'static [(&'static str, i32)]) -> Self {
        self.exits = exits;
        self
    }

    /// With `library` (shell functions, and the exit statuses they name) prepended.
    pub const fn with_library(
        mut self,
        library: &'static str,
        exits: &'static [(&'static str, i32)],
    ) -> Self {
        self.library = Some((library, exits));
        self
    }

    /// The script's short name (`$0`, shown in logs and errors).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The whole text bash runs: the prelude, the library, then the script.
    pub fn full_text(&self) -> String {
        let mut text = String::with_capacity(self.text.len() + 512);
        let library_exits = self.library.map_or(&[][..], |(_, exits)| exits);
        for (name, status) in self.exits.iter().chain(library_exits) {
            text.push_str(&format!("readonly {name}={status}\n"));
        }
        if let Some((library, _)) = self.library {
            text.push_str(library);
            text.push('\n');
        }
        text.push_str(self.text);
        text
    }

    /// The command that runs this script with `params` as `$1`, `$2`, ...
    pub fn command<I, S>(&self, params: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Command::new("bash")
            .arg("-c")
            .arg(self.full_text())
            .arg(self.name)
            .args(params)
            .as_fixed_script()
    }
}

/// Declares the named exit statuses of a script as an enum whose variants carry the
/// status, plus `VARS`, the (variable, status) table a [`Script`] takes
/// ([`Script::with_exits`]): each number is written once, here. The enum also gets
/// `from_status` (the variant of a status, if any) and `status`.
///
/// The form: `exit_statuses! { /// docs  VIS enum NAME { /// docs  VARIANT = STATUS =>
/// "SHELL_VARIABLE", ... } }`; see [`Script`] for an example.
#[macro_export]
macro_rules! exit_statuses {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $var:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        // A caller matches the statuses it acts on; the others are named for the script.
        #[allow(dead_code)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// (shell variable, exit status) of every variant, for the script's prelude.
            $vis const VARS: &'static [(&'static str, i32)] = &[ $( ($var, $code), )+ ];

            /// The variant of an exit status, if it is one.
            #[allow(dead_code)]
            $vis fn from_status(status: i32) -> Option<Self> {
                match status {
                    $( $code => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// The exit status.
            #[allow(dead_code)]
            $vis fn status(self) -> i32 {
                match self {
                    $( $name::$variant => $code, )+
                }
            }
        }
    };
}
pub(crate) use crate::exit_statuses;

#[cfg(test)]
mod tests {
    use super::*;

    exit_statuses! {
        /// Test statuses.
        enum Demo {
            /// First.
            First = 65 => "EXIT_FIRST",
            /// Second.
            Second = 66 => "EXIT_SECOND",
        }
    }

    #[test]
    fn statuses_are_named_once_and_reach_the_script_as_variables() {
        assert_eq!(Demo::from_status(66), Some(Demo::Second));
        assert_eq!(Demo::from_status(0), None);
        assert_eq!(Demo::First.status(), 65);
        let script = Script::new("demo", "exit \"$EXIT_SECOND\"\n").with_exits(Demo::VARS);
        let text = script.full_text();
        assert!(text.starts_with("readonly EXIT_FIRST=65\nreadonly EXIT_SECOND=66\n"));
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(&text)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(66));
    }
}
