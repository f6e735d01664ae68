//! The fixed bash scripts slurm-run runs on the remote side: their text lives in `.sh`
//! files, their exit statuses are named once, and user values only ever reach them as
//! positional parameters.

use super::Command;

/// One script of slurm-run's: its text (a `.sh` file included at build time), the
/// exit statuses it uses by name, and whether it frames several commands' output for
/// one round trip (see [`round_trip`](super::round_trip)).
///
/// The script runs as `bash -c PRELUDE+TEXT NAME PARAMS...`. The prelude sets one
/// read-only variable per named exit status (`EXIT_...=65`), so a number lives in
/// one place, the Rust table, and the script says `exit "$EXIT_..."`; a framed script
/// also gets the framing functions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Script {
    /// A short name, `$0` of the script, shown in logs and errors.
    pub(crate) name: &'static str,
    /// The script text.
    pub(crate) text: &'static str,
    /// The named exit statuses: (variable, status).
    pub(crate) exits: &'static [(&'static str, i32)],
    /// Whether the framing functions are prepended.
    pub(crate) framed: bool,
}

impl Script {
    /// A script with no named exit statuses, not framed.
    pub(crate) const fn new(name: &'static str, text: &'static str) -> Self {
        Script {
            name,
            text,
            exits: &[],
            framed: false,
        }
    }

    /// With these named exit statuses.
    pub(crate) const fn with_exits(mut self, exits: &'static [(&'static str, i32)]) -> Self {
        self.exits = exits;
        self
    }

    /// With the framing functions (`part N CMD ARGS...`) prepended.
    pub(crate) const fn framed(mut self) -> Self {
        self.framed = true;
        self
    }

    /// The whole text bash runs: the prelude, then the script.
    pub(crate) fn full_text(&self) -> String {
        let mut text = String::with_capacity(self.text.len() + 512);
        for (name, status) in self.exits {
            text.push_str(&format!("readonly {name}={status}\n"));
        }
        if self.framed {
            for (name, status) in super::round_trip::FrameExit::VARS {
                text.push_str(&format!("readonly {name}={status}\n"));
            }
            text.push_str(super::round_trip::FRAME_SH);
            text.push('\n');
        }
        text.push_str(self.text);
        text
    }

    /// The command that runs this script with `params` as `$1`, `$2`, ...
    pub(crate) fn command<I, S>(&self, params: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Command::new("bash")
            .arg("-c")
            .arg(self.full_text())
            .arg(self.name)
            .args(params)
    }
}

/// The scripts of the transport layer (the SLURM backend has its own).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn all() -> [Script; 2] {
    [super::WRITE_FILE, super::round_trip::ROUND_TRIP]
}

/// Declares the named exit statuses of a script as an enum whose variants carry the
/// status, plus `VARS`, the (variable, status) table a [`Script`] takes: each number
/// is written once, here.
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
pub(crate) use exit_statuses;

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
