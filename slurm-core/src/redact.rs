//! Secret values known to this process, and the one function that hides them in any text.

use std::fmt;

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

impl fmt::Debug for SecretRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretRegistry")
            .field("names", &self.names().collect::<Vec<_>>())
            .finish()
    }
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
}
