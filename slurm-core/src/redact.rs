//! Secret values known to this process, and the one function that hides them in any text.

use std::fmt;

use crate::{Error, Result};

/// The marker that replaces a secret value.
pub const REDACTED: &str = "[REDACTED]";

/// Values shorter than this are not redacted (they would erase ordinary text); a
/// secret that short is refused by [`SecretRegistry::register`].
pub const MIN_SECRET_LEN: usize = 4;

/// The secret values this process knows, by name. `Debug` prints names only.
#[derive(Clone, Default)]
pub struct SecretRegistry {
    entries: Vec<(String, String)>,
}

impl SecretRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a secret value under `name`. Returns false (and registers nothing)
    /// for a value shorter than [`MIN_SECRET_LEN`].
    pub fn register(&mut self, name: impl Into<String>, value: impl Into<String>) -> bool {
        let value = value.into();
        if value.chars().count() < MIN_SECRET_LEN {
            return false;
        }
        self.entries.push((name.into(), value));
        // Longest first, so a secret that contains another is hidden whole.
        self.entries.sort_by_key(|e| std::cmp::Reverse(e.1.len()));
        true
    }

    /// The registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(name, _)| name.as_str())
    }

    /// The registered (name, value) pairs, for code that must write the values
    /// (the env sidecar) or look for them (the lint).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether no secret is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `text` contains any registered value.
    pub fn contains_secret(&self, text: &str) -> bool {
        self.entries.iter().any(|(_, v)| text.contains(v.as_str()))
    }

    /// `text` with every registered value replaced by [`REDACTED`]. Idempotent.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (_, value) in &self.entries {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), REDACTED);
            }
        }
        out
    }
}

/// Redaction of a text that arrives in pieces (a followed log): a secret cut by a read
/// would come out in two unredacted halves if each piece were redacted alone, and a
/// character cut in the middle of its UTF-8 bytes would be mangled. What could be the
/// start of a secret, and an incomplete character, are held back until the next piece
/// (or [`finish`](Self::finish), at the stream's end).
#[derive(Debug, Default)]
pub(crate) struct StreamRedactor {
    /// Bytes received and not yet given out.
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// Take `bytes` (the next piece); return what can be shown now, redacted with
    /// `registry`.
    pub(crate) fn push(&mut self, registry: &SecretRegistry, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        // Complete characters only: an incomplete sequence at the end waits.
        let complete = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(error) if error.error_len().is_none() => error.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let text = String::from_utf8_lossy(&self.pending[..complete]).into_owned();
        let keep = held_from(registry, &text);
        let shown = registry.redact(&text[..keep]);
        let mut rest = text.as_bytes()[keep..].to_vec();
        rest.extend_from_slice(&self.pending[complete..]);
        self.pending = rest;
        shown
    }

    /// The stream ended: everything held back, redacted.
    pub(crate) fn finish(&mut self, registry: &SecretRegistry) -> String {
        let text = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
        registry.redact(&text)
    }
}

/// Where the part of `text` to hold back starts: the longest ending that is the start of
/// a secret value (more text may complete it), moved back so that no secret found whole
/// in `text` is cut.
fn held_from(registry: &SecretRegistry, text: &str) -> usize {
    let mut keep = text.len();
    for (at, _) in text.char_indices() {
        let tail = &text[at..];
        if registry
            .entries
            .iter()
            .any(|(_, value)| value.len() > tail.len() && value.starts_with(tail))
        {
            keep = at;
            break;
        }
    }
    loop {
        let crossing = registry
            .entries
            .iter()
            .flat_map(|(_, value)| {
                text.match_indices(value.as_str())
                    .map(|(start, found)| (start, start + found.len()))
            })
            .filter(|(start, end)| *start < keep && *end > keep)
            .map(|(start, _)| start)
            .min();
        match crossing {
            Some(start) => keep = start,
            None => return keep,
        }
    }
}

impl fmt::Debug for SecretRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretRegistry")
            .field("names", &self.names().collect::<Vec<_>>())
            .finish()
    }
}

/// The one rule for a secret's value, whichever backend submits it: set and not empty,
/// one line without NUL, and at least [`MIN_SECRET_LEN`] characters (shorter values
/// cannot be redacted safely). The error names the secret and the fix, never the value.
pub(crate) fn check_secret_value(name: &str, value: Option<&str>) -> Result<()> {
    let value = value.filter(|v| !v.is_empty()).ok_or_else(|| {
        Error::config(
            name.to_string(),
            format!("the spec names the secret {name} but it is not set in the submitting environment; export {name}=... (its value travels only in a mode-600 sidecar)"),
        )
    })?;
    if value.contains('\0') || value.contains('\n') {
        return Err(Error::config(
            name.to_string(),
            "the secret's value holds a NUL or newline; give a one-line value",
        ));
    }
    if value.chars().count() < MIN_SECRET_LEN {
        return Err(Error::config(
            name.to_string(),
            format!("the secret's value is shorter than {MIN_SECRET_LEN} characters, too short to redact safely"),
        ));
    }
    Ok(())
}

/// Whether `name` names a secret: one of its word parts (split at `_`, `-`, `.` and
/// camel case) is SECRET, PASSWORD, PASSWD, TOKEN, CREDENTIAL or APIKEY, or two
/// neighbouring parts are API KEY, ACCESS KEY or NGC KEY. `HF_TOKEN` is one,
/// `TOKENIZERS_PARALLELISM` is not. The secret lint and log redaction share this rule.
pub fn is_secret_name(name: &str) -> bool {
    let parts = word_parts(name);
    let single = [
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "TOKEN",
        "CREDENTIAL",
        "APIKEY",
    ];
    let pairs = [("API", "KEY"), ("ACCESS", "KEY"), ("NGC", "KEY")];
    parts.iter().any(|p| single.contains(&p.as_str()))
        || parts
            .windows(2)
            .any(|w| pairs.contains(&(w[0].as_str(), w[1].as_str())))
}

/// `name` split at `_`, `-`, `.` and camel-case boundaries, upper-cased.
fn word_parts(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for chunk in name.split(['_', '-', '.']) {
        let chars: Vec<char> = chunk.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let lower_to_upper = chars[i - 1].is_lowercase() && chars[i].is_uppercase();
            let acronym_end = chars[i - 1].is_uppercase()
                && chars[i].is_uppercase()
                && chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            if lower_to_upper || acronym_end {
                parts.push(chars[start..i].iter().collect::<String>().to_uppercase());
                start = i;
            }
        }
        if start < chars.len() {
            parts.push(chars[start..].iter().collect::<String>().to_uppercase());
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_every_value_and_is_idempotent() {
        let mut reg = SecretRegistry::new();
        assert!(reg.register("HF_TOKEN", "hf_abcdef123456"));
        assert!(!reg.register("SHORT", "ab"));
        let once = reg.redact("token=hf_abcdef123456 again hf_abcdef123456");
        assert_eq!(once, "token=[REDACTED] again [REDACTED]");
        assert_eq!(reg.redact(&once), once);
        assert!(!format!("{reg:?}").contains("hf_abc"));
    }

    #[test]
    fn a_stream_never_shows_a_secret_cut_between_pieces() {
        let mut reg = SecretRegistry::new();
        reg.register("A", "abcd1234");
        reg.register("B", "1234zz99");
        let text = "x abcd1234zz99 y abcd1234 z";
        for cut in 1..text.len() {
            let mut stream = StreamRedactor::default();
            let mut out = String::new();
            for piece in text.as_bytes().chunks(cut) {
                let shown = stream.push(&reg, piece);
                assert!(
                    !shown.contains("abcd") && !shown.contains("1234"),
                    "{cut}: {shown}"
                );
                out.push_str(&shown);
            }
            out.push_str(&stream.finish(&reg));
            assert_eq!(out, reg.redact(text), "cut every {cut} bytes");
        }
    }

    #[test]
    fn secret_names_follow_the_word_rule() {
        for name in [
            "HF_TOKEN",
            "MY_API_KEY",
            "db-password",
            "awsAccessKey",
            "NGC_KEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "TOKENIZERS_PARALLELISM",
            "max_new_tokens",
            "PATH",
            "KEYBOARD",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
