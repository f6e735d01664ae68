//! [`PostgresRecordStore`]: records in a PostgreSQL database, for an orchestrator run as
//! several replicas on several machines.
//!
//! What keeps replicas apart is the server's, never a clock: a change of a record holds
//! its row's lock for the read, the rule ([`JobRecord::apply_mark`],
//! [`JobRecord::apply_update`]) and the write, so a retry is claimed once whoever asks;
//! a submit lease is a session-level advisory lock, held by the store's own connection
//! and released by the server when that session ends, so a replica that dies frees its
//! leases at once. Tables are made when missing, in the connection's schema (the URL's
//! `options=-csearch_path=...` chooses another). TLS follows the URL's `sslmode`
//! (`prefer` by default, `require`, `disable`) through native-tls, which checks the
//! server's certificate and name against the system's roots.

mod session;

use std::str::FromStr;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use sha2::{Digest, Sha256};
use slurm_core::{
    Error, JobId, JobRecord, Listing, Mark, RecordFilter, RecordStore, Result, RetryClaim,
    SecretRegistry, SubmitLease,
};

use crate::cache::ReadCache;
use crate::columns::{list_query, read_body, Dialect, Row};
use session::{Job, Session};

/// How long a connection attempt may take when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Records in a PostgreSQL database (see the module's documentation).
#[derive(Debug)]
pub struct PostgresRecordStore {
    /// The URL without its password (for messages).
    target: String,
    /// The schema the tables are in (it scopes the lease keys).
    schema: String,
    jobs: Sender<Job>,
    redactor: Option<SecretRegistry>,
    cache: ReadCache,
}

/// `url` with its password left out, for messages.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| !p.to_ascii_lowercase().starts_with("password="))
                .collect();
            if kept.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

impl PostgresRecordStore {
    /// Connect to the database `url` names (`postgres://user:password@host:port/db`, with
    /// libpq's parameters: `sslmode`, `connect_timeout`, `options`, ...) and make the
    /// tables when missing. Errors name the URL without its password.
    pub fn connect(url: &str) -> Result<Self> {
        let target = without_password(url);
        let mut config = postgres::Config::from_str(url).map_err(|e| {
            Error::config(
                "SLURM_RUN_RECORDS",
                format!("`{target}` is not a PostgreSQL URL ({e}); give postgres://user:password@host:port/database"),
            )
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("slurm-run");
        }
        let tls = native_tls::TlsConnector::new()
            .map_err(|e| Error::io("setting up TLS for PostgreSQL", std::io::Error::other(e)))?;
        let tls = postgres_native_tls::MakeTlsConnector::new(tls);
        let jobs = session::start(Session::new(config, tls, target.clone()))?;
        let mut store = PostgresRecordStore {
            target,
            schema: String::new(),
            jobs,
            redactor: None,
            cache: ReadCache::default(),
        };
        store.schema = store.call(|session| session.prepare())?;
        Ok(store)
    }

    /// Redact transition messages with `registry` before they are written.
    pub fn with_redactor(mut self, registry: SecretRegistry) -> Self {
        self.redactor = Some(registry);
        self
    }

    /// The database, as its URL without the password.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Open every record of `records` in one transaction, as they are (an import: their
    /// histories are not redacted again): all of them, or none when one fails. An id
    /// that exists already is refused ([`Error::Invalid`] on `id`) and nothing is opened.
    pub fn open_many(&self, records: &[JobRecord]) -> Result<()> {
        let rows = records.iter().map(Row::of).collect::<Result<Vec<_>>>()?;
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let added = self.call(move |session| session.insert(rows))?;
        match added.iter().position(|new| !new) {
            None => Ok(()),
            Some(at) => Err(Error::invalid(
                "id",
                format!(
                    "record {} already exists in {}; nothing was opened",
                    ids[at], self.target
                ),
            )),
        }
    }

    /// Store `rows` as they are, in one transaction; for each, whether it was new.
    #[cfg(feature = "testing")]
    pub(crate) fn insert_rows(&self, rows: Vec<Row>) -> Result<Vec<bool>> {
        self.call(move |session| session.insert(rows))
    }

    /// Run `job` on the worker thread and wait for its answer.
    fn call<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Session) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (answer, answered) = mpsc::sync_channel(1);
        self.jobs
            .send(Box::new(move |session| {
                let _ = answer.send(job(session));
            }))
            .map_err(|_| self.gone())?;
        answered.recv().map_err(|_| self.gone())?
    }

    fn gone(&self) -> Error {
        Error::io(
            format!("the PostgreSQL store of {}", self.target),
            std::io::Error::other("its thread is gone"),
        )
    }

    fn not_found(&self, id: &JobId) -> Error {
        Error::NotFound(format!("job record {id} in {}", self.target))
    }

    /// The lease key of `id`: 64 bits of SHA-256 of the schema and the id.
    fn lease_key(&self, id: &JobId) -> i64 {
        let digest = Sha256::digest(format!("slurm-run lease\0{}\0{id}", self.schema));
        i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
    }

    /// Change record `id` under its row's lock: `change` gets the record as stored and
    /// answers the record to store (`None`: leave it).
    fn change(
        &self,
        id: &JobId,
        change: impl FnOnce(&JobRecord) -> Result<Option<JobRecord>>,
    ) -> Result<JobRecord> {
        let (body_tx, body_rx) = mpsc::channel();
        let (decision_tx, decision_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let key = id.to_string();
        self.jobs
            .send(Box::new(move |session| {
                session.change(key, body_tx, decision_rx, done_tx)
            }))
            .map_err(|_| self.gone())?;
        let body = body_rx.recv().map_err(|_| self.gone())??;
        let body = body.ok_or_else(|| self.not_found(id))?;
        let record = read_body(id.as_str(), body.as_bytes(), &self.target);
        let decided = record.and_then(|record| {
            let next = change(&record)?;
            Ok((record, next))
        });
        let (record, next) = match decided {
            Ok(decided) => decided,
            Err(error) => {
                let _ = decision_tx.send(None);
                return Err(error);
            }
        };
        let Some(next) = next else {
            let _ = decision_tx.send(None);
            return Ok(record);
        };
        let row = match Row::of(&next) {
            Ok(row) => row,
            Err(error) => {
                let _ = decision_tx.send(None);
                return Err(error);
            }
        };
        let labels_changed = next.labels() != record.labels();
        decision_tx
            .send(Some((row, labels_changed)))
            .map_err(|_| self.gone())?;
        done_rx.recv().map_err(|_| self.gone())??;
        Ok(next)
    }

    /// The record of a row read at `version` (the kept one when it is that version).
    fn record_of(
        &self,
        id: &str,
        version: i64,
        body: Option<&str>,
        keep: bool,
    ) -> Result<JobRecord> {
        if let Some(record) = self.cache.get(id, version) {
            return Ok(record);
        }
        let body =
            body.ok_or_else(|| Error::NotFound(format!("job record {id} in {}", self.target)))?;
        let record = read_body(id, body.as_bytes(), &self.target)?;
        if keep {
            self.cache.keep(id, version, &record);
        }
        Ok(record)
    }
}

/// A held advisory lock: given back to the worker when dropped.
struct Lease {
    key: i64,
    jobs: Sender<Job>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let key = self.key;
        let _ = self
            .jobs
            .send(Box::new(move |session| session.release_lease(key)));
    }
}

impl RecordStore for PostgresRecordStore {
    fn open(&self, record: &JobRecord) -> Result<()> {
        let mut record = record.clone();
        if let Some(registry) = &self.redactor {
            record.redact_history(registry);
        }
        let row = Row::of(&record)?;
        let added = self.call(move |session| session.insert(vec![row]))?;
        if added.first() == Some(&true) {
            Ok(())
        } else {
            Err(Error::invalid(
                "id",
                format!("record {} already exists; mint a new id", record.id()),
            ))
        }
    }

    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
        let mut retry = retry.clone();
        if let Some(registry) = &self.redactor {
            retry.redact_history(registry);
        }
        let row = Row::of(&retry)?;
        let (claim, written) = self.call(move |session| session.open_retry(retry, row))?;
        if let Some(written) = written {
            let _ = self.cache.keep_written(vec![Ok(written)]);
        }
        Ok(claim)
    }

    fn get(&self, id: &JobId) -> Result<JobRecord> {
        let mut records = self.get_many(std::slice::from_ref(id))?;
        Ok(records.remove(0))
    }

    fn get_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        let names: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let kept: Vec<i64> = self
            .cache
            .versions(names.iter().map(String::as_str))
            .into_iter()
            .map(|kept| kept.unwrap_or(-1))
            .collect();
        let rows = self.call(move |session| session.get_many(names, kept))?;
        let rows: std::collections::HashMap<String, (i64, Option<String>)> = rows
            .into_iter()
            .map(|(id, version, body)| (id, (version, body)))
            .collect();
        ids.iter()
            .map(|id| {
                let (version, body) = rows.get(id.as_str()).ok_or_else(|| self.not_found(id))?;
                self.record_of(id.as_str(), *version, body.as_deref(), true)
            })
            .collect()
    }

    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        let redactor = self.redactor.as_ref();
        self.change(id, |record| {
            let mut next = record.clone();
            Ok(next.apply_mark(mark, redactor)?.then_some(next))
        })
    }

    fn revision(&self) -> Result<Option<u64>> {
        let revision = self.call(|session| session.revision())?;
        Ok(Some(revision as u64))
    }

    fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
        let redactor = self.redactor.clone();
        let answers = self.call(move |session| session.mark_many(marks, redactor.as_ref()))?;
        Ok(self.cache.keep_written(answers))
    }

    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        self.change(id, |record| record.apply_update(change).map(Some))
    }

    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        self.list_readable(filter)?.into_all()
    }

    fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
        let query = list_query(filter, Dialect::Postgres);
        let rows = self.call(move |session| session.list(query.sql, query.values))?;
        let mut listing = Listing::default();
        for (id, version, body) in rows {
            match self.record_of(&id, version, Some(&body), false) {
                Ok(record) if filter.matches(&record) => listing.records.push(record),
                Ok(_) => {}
                Err(error) => listing.unreadable.push(error),
            }
        }
        Ok(listing)
    }

    fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        let key = self.lease_key(id);
        let taken = self.call(move |session| session.try_lease(key))?;
        Ok(taken.then(|| {
            SubmitLease::holding(Lease {
                key,
                jobs: self.jobs.clone(),
            })
        }))
    }

    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        let key = self.lease_key(id);
        self.call(move |session| session.lease_held(key)).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_named_without_its_password() {
        for (url, named) in [
            (
                "postgres://run:s3cret@db:5432/records",
                "postgres://run@db:5432/records",
            ),
            (
                "postgresql://run@db/records?sslmode=require",
                "postgresql://run@db/records?sslmode=require",
            ),
            (
                "postgres://db/records?user=run&password=s3cret&sslmode=require",
                "postgres://db/records?user=run&sslmode=require",
            ),
            ("postgres://run:p%40ss@db", "postgres://run@db"),
        ] {
            assert_eq!(without_password(url), named);
            assert!(!without_password(url).contains("s3cret"));
        }
    }
}
