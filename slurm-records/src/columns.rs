//! What both databases keep of a record beside its JSON (its state, whether it ended,
//! when it was opened, its labels), so a listing filters and orders without reading
//! every record; and a [`RecordFilter`] as the SQL conditions on those columns.
//!
//! The record itself is its JSON (`body`), as the file store writes it: the one format,
//! read back by [`JobRecord::from_stored_json`], so an old record reads as it was written.

use slurm_core::{Error, JobRecord, RecordFilter, Result};

/// The tables of both stores (the same names in SQLite and in PostgreSQL).
pub(crate) const RECORDS_TABLE: &str = "slurm_run_records";
/// One row per label of a record.
pub(crate) const LABELS_TABLE: &str = "slurm_run_record_labels";
/// The store's own facts (`schema`: the version of these tables).
pub(crate) const META_TABLE: &str = "slurm_run_meta";
/// The one-row table whose value every write of a record raises (a trigger): the
/// store's revision (`RecordStore::revision`).
pub(crate) const REVISION_TABLE: &str = "slurm_run_revision";

/// The version of the tables this slurm-run writes (a newer one is refused).
pub(crate) const TABLES_VERSION: i64 = 1;

/// A record as a row: its columns and its JSON.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) state: String,
    pub(crate) terminal: bool,
    /// Nanoseconds since the Unix epoch (the order the file store keeps, to the nanosecond).
    pub(crate) submitted_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) body: String,
    pub(crate) labels: Vec<(String, String)>,
}

impl Row {
    /// The row of `record`.
    pub(crate) fn of(record: &JobRecord) -> Result<Row> {
        let body = serde_json::to_string(record).map_err(|e| {
            Error::io(
                format!("writing record {} as JSON", record.id()),
                std::io::Error::other(e),
            )
        })?;
        Ok(Row {
            id: record.id().to_string(),
            state: record.state().to_string(),
            terminal: record.is_terminal(),
            submitted_at: record
                .submitted_at()
                .timestamp_nanos_opt()
                .unwrap_or(i64::MAX),
            updated_at: record
                .updated_at()
                .timestamp_nanos_opt()
                .unwrap_or(i64::MAX),
            body,
            labels: record
                .labels()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Text(String),
    Int(i64),
}

/// How a database numbers its placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// `?1`, `?2`, ...
    Sqlite,
    /// `$1`, `$2`, ...
    Postgres,
}

/// A query and the values of its placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    pub(crate) sql: String,
    pub(crate) values: Vec<Value>,
}

impl Query {
    fn bind(&mut self, dialect: Dialect, value: Value) -> String {
        self.values.push(value);
        match dialect {
            Dialect::Sqlite => format!("?{}", self.values.len()),
            Dialect::Postgres => format!("${}", self.values.len()),
        }
    }
}

/// The listing of `filter`: `id, version, body` of each record passing it, oldest first
/// (ties by id, as the file store orders them).
pub(crate) fn list_query(filter: &RecordFilter, dialect: Dialect) -> Query {
    let mut query = Query {
        sql: String::new(),
        values: Vec::new(),
    };
    let mut conditions = Vec::new();
    if !filter.states.is_empty() {
        let states: Vec<String> = filter
            .states
            .iter()
            .map(|s| query.bind(dialect, Value::Text(s.to_string())))
            .collect();
        conditions.push(format!("state IN ({})", states.join(", ")));
    }
    if filter.active_only {
        conditions.push("terminal = 0".to_string());
    }
    if let Some(since) = filter.submitted_since {
        let at = query.bind(
            dialect,
            Value::Int(since.timestamp_nanos_opt().unwrap_or(i64::MAX)),
        );
        conditions.push(format!("submitted_at >= {at}"));
    }
    if let Some(before) = filter.submitted_before {
        let at = query.bind(
            dialect,
            Value::Int(before.timestamp_nanos_opt().unwrap_or(i64::MAX)),
        );
        conditions.push(format!("submitted_at < {at}"));
    }
    for (key, value) in &filter.labels {
        let key = query.bind(dialect, Value::Text(key.clone()));
        let value = query.bind(dialect, Value::Text(value.clone()));
        conditions.push(format!(
            "id IN (SELECT id FROM {LABELS_TABLE} WHERE key = {key} AND value = {value})"
        ));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    query.sql =
        format!("SELECT id, version, body FROM {RECORDS_TABLE}{filter} ORDER BY submitted_at, id");
    query
}

/// Read a row's body as record `id` of `origin` (the store, for the error). The record is
/// named only when it cannot be read: a listing builds no name per record.
pub(crate) fn read_body(id: &str, body: &[u8], origin: &str) -> Result<JobRecord> {
    let where_ = || format!("record {id} in {origin}");
    let record = JobRecord::from_stored_json(body, "").map_err(|error| match error {
        Error::CorruptRecord { message, .. } => Error::CorruptRecord {
            path: where_(),
            message,
        },
        other => other,
    })?;
    if record.id().as_str() != id {
        return Err(Error::CorruptRecord {
            path: where_(),
            message: format!("holds id {} instead of {id}", record.id()),
        });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_core::JobState;

    #[test]
    fn a_filter_becomes_conditions_on_the_columns_with_every_value_bound() {
        let since = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let filter = RecordFilter::any()
            .state(JobState::Pending)
            .state(JobState::Running)
            .label("arch", "x'; DROP TABLE slurm_run_records; --")
            .active()
            .since(since);
        let query = list_query(&filter, Dialect::Postgres);
        assert_eq!(
            query.sql,
            "SELECT id, version, body FROM slurm_run_records WHERE state IN ($1, $2) AND \
             terminal = 0 AND submitted_at >= $3 AND id IN (SELECT id FROM \
             slurm_run_record_labels WHERE key = $4 AND value = $5) ORDER BY submitted_at, id"
        );
        assert_eq!(query.values[2], Value::Int(1_700_000_000_000_000_000));
        assert_eq!(
            query.values[4],
            Value::Text("x'; DROP TABLE slurm_run_records; --".into())
        );
        let sqlite = list_query(&RecordFilter::any(), Dialect::Sqlite);
        assert_eq!(
            sqlite.sql,
            "SELECT id, version, body FROM slurm_run_records ORDER BY submitted_at, id"
        );
        assert!(list_query(&filter, Dialect::Sqlite).sql.contains("?5"));
    }
}
