//! The secret values this backend submitted, kept in memory only (for log redaction and
//! for its own retries), and the redactor of a record's logs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::record::{JobId, JobRecord};
use crate::redact::{is_secret_name, SecretRegistry};

/// The secret values one backend submitted, never stored.
#[derive(Debug, Default)]
pub(super) struct SecretMemory {
    /// Every value submitted: logs are redacted of them.
    known: Mutex<SecretRegistry>,
    /// The same values by record, for the retries this backend makes.
    by_record: Mutex<HashMap<JobId, BTreeMap<String, String>>>,
}

impl SecretMemory {
    /// Remember the values of `secrets` of record `id`.
    pub(super) fn remember(&self, id: &JobId, secrets: &SecretRegistry) {
        if secrets.is_empty() {
            return;
        }
        let mut known = self.known.lock().expect("secrets lock");
        for (name, value) in secrets.entries() {
            if !known.entries().any(|(_, v)| v == value) {
                known.register(name, value);
            }
        }
        self.by_record.lock().expect("secrets lock").insert(
            id.clone(),
            secrets
                .entries()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        );
    }

    /// The values record `id` was submitted with by this backend, if it was.
    pub(super) fn values_of(&self, id: &JobId) -> Option<BTreeMap<String, String>> {
        self.by_record
            .lock()
            .expect("secrets lock")
            .get(id)
            .cloned()
    }

    /// Logs may echo a secret the job received; hide every value this process knows:
    /// the secrets this backend submitted, the values in this process's environment of
    /// the names the record declares in `secrets` (`WANDB_KEY`, `DB_PASS`, ...), and of
    /// every variable named like a secret.
    pub(super) fn redactor_for(&self, record: &JobRecord) -> SecretRegistry {
        let mut registry = self.known.lock().expect("secrets lock").clone();
        for name in &record.secret_names {
            if let Ok(value) = std::env::var(name) {
                registry.register(name.clone(), value);
            }
        }
        for (name, value) in std::env::vars() {
            if is_secret_name(&name) {
                registry.register(name, value);
            }
        }
        registry
    }
}
