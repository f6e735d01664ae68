//! Fixtures of the RecordStore conformance suite (`slurm_core::testing::record_suite`)
//! for the database stores (cargo feature `testing`): a fresh SQLite file, and a fresh
//! schema on a PostgreSQL server (dropped afterwards).

use std::sync::Arc;

use chrono::Utc;
use slurm_core::testing::record_suite::{suite_redactor, Planted, RecordStoreFixture};
use slurm_core::{JobId, JobRecord, RecordStore, Result};

use crate::columns::Row;
use crate::{PostgresRecordStore, SqliteRecordStore};

/// The row of a planted record: its columns from what parses of it, its body as given.
fn planted_row(id: &JobId, planted: Planted<'_>) -> Row {
    let body = String::from_utf8_lossy(planted.bytes()).into_owned();
    match planted {
        Planted::Json(text) => {
            let record: JobRecord = serde_json::from_str(text).expect("a planted record parses");
            Row {
                body,
                ..Row::of(&record).expect("a row")
            }
        }
        Planted::Unreadable => {
            let now = Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
            Row {
                id: id.to_string(),
                state: "SUBMITTING".into(),
                terminal: false,
                submitted_at: now,
                updated_at: now,
                body,
                labels: Vec::new(),
            }
        }
    }
}

/// A SQLite database in a temporary folder.
#[derive(Debug)]
pub struct SqliteFixture {
    store: Arc<SqliteRecordStore>,
    _dir: tempfile::TempDir,
}

impl SqliteFixture {
    /// A new, empty database redacting with the suite's redactor.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = SqliteRecordStore::open(dir.path().join("records.sqlite"))
            .expect("a database")
            .with_redactor(suite_redactor());
        SqliteFixture {
            store: Arc::new(store),
            _dir: dir,
        }
    }
}

impl Default for SqliteFixture {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordStoreFixture for SqliteFixture {
    fn store(&self) -> Arc<dyn RecordStore> {
        self.store.clone()
    }

    fn shared(&self) -> Option<String> {
        Some(self.store.path().display().to_string())
    }

    fn open_shared(shared: &str) -> Result<Box<dyn RecordStore>> {
        Ok(Box::new(SqliteRecordStore::open(shared)?))
    }

    fn plant(&self, id: &JobId, planted: Planted<'_>) -> bool {
        self.store
            .insert_row(&planted_row(id, planted))
            .expect("plant a row")
    }
}

/// A schema of its own on the PostgreSQL server of a URL, dropped when the fixture is.
#[derive(Debug)]
pub struct PostgresFixture {
    store: Arc<PostgresRecordStore>,
    url: String,
    base: String,
    schema: String,
}

impl PostgresFixture {
    /// A new, empty schema on the server `url` names (its user may create schemas), and a
    /// store in it redacting with the suite's redactor.
    pub fn new(url: &str) -> Self {
        let schema = format!("suite_{:016x}", rand::random::<u64>());
        admin(url, &format!("CREATE SCHEMA {schema}"));
        let url_in_schema = in_schema(url, &schema);
        let store = PostgresRecordStore::connect(&url_in_schema)
            .expect("connect to the test PostgreSQL server")
            .with_redactor(suite_redactor());
        PostgresFixture {
            store: Arc::new(store),
            url: url_in_schema,
            base: url.to_string(),
            schema,
        }
    }

    /// The URL of the fixture's schema (its tables are there).
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// `url` with the connection's schema set to `schema` (libpq's `options`).
pub fn in_schema(url: &str, schema: &str) -> String {
    let join = if url.contains('?') { '&' } else { '?' };
    format!("{url}{join}options=-csearch_path%3D{schema}")
}

/// Run `sql` on the server of `url`, on a thread of its own (the client blocks on a
/// runtime of its own, which must not be a caller's).
fn admin(url: &str, sql: &str) {
    let (url, sql) = (url.to_string(), sql.to_string());
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap_or_else(|e| {
            panic!(
                "connect to {}: {e}",
                crate::postgres::without_password(&url)
            )
        });
        client
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    })
    .join()
    .expect("the admin thread");
}

/// A record's row held locked by a transaction on another connection, as another
/// replica's change of that record holds it ([`PostgresFixture::hold_row`]): every
/// change of the record waits until it is released (or dropped).
pub struct HeldRow {
    release: Option<std::sync::mpsc::Sender<()>>,
    holder: Option<std::thread::JoinHandle<()>>,
}

impl HeldRow {
    /// Commit the holding transaction: the row is free.
    pub fn release(mut self) {
        self.end();
    }

    fn end(&mut self) {
        drop(self.release.take());
        if let Some(holder) = self.holder.take() {
            holder.join().expect("the row's holder");
        }
    }
}

impl Drop for HeldRow {
    fn drop(&mut self) {
        self.end();
    }
}

impl PostgresFixture {
    /// Lock the row of record `id` in a transaction on a connection of its own (on a
    /// thread of its own), returned once the lock is held.
    pub fn hold_row(&self, id: &JobId) -> HeldRow {
        let (url, id) = (self.url.clone(), id.to_string());
        let (locked_tx, locked) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
            let mut tx = client.transaction().expect("begin");
            let rows = tx
                .query(
                    "SELECT id FROM slurm_run_records WHERE id = $1 FOR UPDATE",
                    &[&id],
                )
                .expect("lock the row");
            assert_eq!(rows.len(), 1, "the row of {id} exists");
            locked_tx.send(()).expect("say the row is held");
            let _ = released.recv();
            tx.commit().expect("commit");
        });
        locked.recv().expect("the row locked");
        HeldRow {
            release: Some(release),
            holder: Some(holder),
        }
    }
}

impl Drop for PostgresFixture {
    fn drop(&mut self) {
        let (url, sql) = (
            self.base.clone(),
            format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        );
        let _ = std::thread::spawn(move || {
            if let Ok(mut client) = postgres::Client::connect(&url, postgres::NoTls) {
                let _ = client.batch_execute(&sql);
            }
        })
        .join();
    }
}

impl RecordStoreFixture for PostgresFixture {
    fn store(&self) -> Arc<dyn RecordStore> {
        self.store.clone()
    }

    fn shared(&self) -> Option<String> {
        Some(self.url.clone())
    }

    fn open_shared(shared: &str) -> Result<Box<dyn RecordStore>> {
        Ok(Box::new(PostgresRecordStore::connect(shared)?))
    }

    fn plant(&self, id: &JobId, planted: Planted<'_>) -> bool {
        self.store
            .insert_rows(vec![planted_row(id, planted)])
            .expect("plant a row")
            .first()
            .copied()
            .unwrap_or(false)
    }
}
