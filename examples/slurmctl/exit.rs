//! Exit statuses (see the program's docs) and the field an error names.

use slurm_run::{CheckKind, Error, ErrorKind};

/// Success.
pub(crate) const OK: u8 = 0;
/// An internal error: a bug.
pub(crate) const INTERNAL: u8 = 1;
/// Bad input or configuration: the message names the field and the fix (also: the
/// credentials `credentials check` looked for are absent).
pub(crate) const BAD_INPUT: u8 = 2;
/// The remote side or the connection failed.
pub(crate) const REMOTE: u8 = 3;
/// `watch` saw a job end ERROR, CANCELED or NOT_SUBMITTED (after its retries).
pub(crate) const WATCH_SAW_FAILURE: u8 = 4;

/// The exit status for an error (see the module docs).
pub(crate) fn exit_code(error: &Error) -> u8 {
    match error.kind() {
        ErrorKind::Config
        | ErrorKind::Invalid
        | ErrorKind::Lint
        | ErrorKind::Render
        | ErrorKind::NotFound
        | ErrorKind::CorruptRecord
        | ErrorKind::Io => BAD_INPUT,
        ErrorKind::Preflight => match error {
            Error::Preflight { kind, .. } => check_exit_code(*kind),
            _ => BAD_INPUT,
        },
        ErrorKind::Parse
        | ErrorKind::Connect
        | ErrorKind::Auth
        | ErrorKind::HostKey
        | ErrorKind::Transport
        | ErrorKind::Remote
        | ErrorKind::Timeout
        | ErrorKind::Ambiguous => REMOTE,
        _ => INTERNAL,
    }
}

/// The exit status for a failed preflight check: the connection is the cluster's (3),
/// everything else is input or configuration to fix (2).
pub(crate) fn check_exit_code(kind: CheckKind) -> u8 {
    match kind {
        CheckKind::Connection => REMOTE,
        _ => BAD_INPUT,
    }
}

/// The field an error names, when it names one.
pub(crate) fn error_field(error: &Error) -> Option<&str> {
    match error {
        Error::Config { field, .. } | Error::Invalid { field, .. } => Some(field),
        Error::Preflight { check, .. } => Some(check),
        _ => None,
    }
}
