//! A listing's rows read in batches and parsed on every core, the records kept in the
//! order the query gives them.
//!
//! Parsing a record's JSON costs about three times what reading its row does, so one
//! thread (the caller's, which holds the database's cursor) reads the rows into batches
//! and parsing threads turn each batch into records; the caller puts the parsed batches
//! back in the order it read them. A few batches are in flight at a time, so a listing
//! holds its records and a few hundred KiB of bodies, never every body at once. A
//! listing of one batch or less is parsed on the caller's thread, starting none.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};

use slurm_core::{Listing, RecordFilter, Result};

use crate::cache::ReadCache;
use crate::columns::read_body;

/// Rows read before they go to be parsed together (about 200 KiB of bodies).
pub(crate) const BATCH_ROWS: usize = 256;

/// The most threads a listing parses on: reading a row costs about a third of parsing
/// it, so past this many the one thread reading rows cannot keep them busy.
const MOST_PARSERS: usize = 4;

/// The threads a listing parses on here: one per core, at most [`MOST_PARSERS`] (asked
/// of the system once: the answer reads the process's CPU quota, which costs more than
/// a small listing).
pub(crate) fn parsers() -> usize {
    static PARSERS: OnceLock<usize> = OnceLock::new();
    *PARSERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |cores| cores.get())
            .min(MOST_PARSERS)
    })
}

/// Rows of a listing copied out of the database: each row's id, version and body.
#[derive(Debug, Default)]
pub(crate) struct RowBatch {
    ids: String,
    bodies: Vec<u8>,
    /// Per row: where its id ends in `ids`, where its body ends in `bodies`, its version.
    ends: Vec<(usize, usize, i64)>,
}

impl RowBatch {
    /// Add row `id` read at `version` with `body`.
    pub(crate) fn push(&mut self, id: &str, version: i64, body: &[u8]) {
        self.ids.push_str(id);
        self.bodies.extend_from_slice(body);
        self.ends.push((self.ids.len(), self.bodies.len(), version));
    }

    /// The rows held.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Hold no row (keeping the room, for the next rows).
    fn clear(&mut self) {
        self.ids.clear();
        self.bodies.clear();
        self.ends.clear();
    }

    /// Each row: its id, version and body.
    fn rows(&self) -> impl ExactSizeIterator<Item = (&str, i64, &[u8])> {
        (0..self.ends.len()).map(|at| {
            let (id_at, body_at) = match at.checked_sub(1) {
                Some(before) => (self.ends[before].0, self.ends[before].1),
                None => (0, 0),
            };
            let (id_end, body_end, version) = self.ends[at];
            (
                &self.ids[id_at..id_end],
                version,
                &self.bodies[body_at..body_end],
            )
        })
    }
}

/// What turns a batch of rows into records: the store's read cache (a row read at the
/// version kept is the record kept, not parsed again; a listing keeps nothing new), the
/// store's name for errors, and the filter the records pass.
#[derive(Debug)]
pub(crate) struct RowReader<'a> {
    pub(crate) cache: &'a ReadCache,
    pub(crate) origin: &'a str,
    pub(crate) filter: &'a RecordFilter,
}

impl RowReader<'_> {
    /// The records of `batch` passing the filter and the errors of its unreadable rows,
    /// each in its order.
    fn read(&self, batch: &RowBatch) -> Listing {
        let mut kept = self
            .cache
            .kept_at(batch.rows().map(|(id, version, _)| (id, version)))
            .into_iter()
            .peekable();
        let mut read = Listing {
            records: Vec::with_capacity(batch.len()),
            unreadable: Vec::new(),
        };
        for (place, (id, _, body)) in batch.rows().enumerate() {
            let record = match kept.next_if(|(at, _)| *at == place) {
                Some((_, record)) => Ok(record),
                None => read_body(id, body, self.origin),
            };
            match record {
                Ok(record) if self.filter.matches(&record) => read.records.push(record),
                Ok(_) => {}
                Err(error) => read.unreadable.push(error),
            }
        }
        read
    }
}

/// Add the records and errors of a batch, `read`, to those of `listing`.
fn add(listing: &mut Listing, mut read: Listing) {
    listing.records.append(&mut read.records);
    listing.unreadable.append(&mut read.unreadable);
}

/// The listing of the rows `fill` reads: called with an empty batch, it adds up to
/// [`BATCH_ROWS`] rows (fewer only when none are left). Rows are parsed by `reader` on
/// up to `parsers` threads; `fill` runs on the caller's thread only. A failure of `fill`
/// ends the listing with it.
pub(crate) fn list_rows(
    reader: &RowReader<'_>,
    parsers: usize,
    mut fill: impl FnMut(&mut RowBatch) -> Result<()>,
) -> Result<Listing> {
    let mut listing = Listing::default();
    let mut batch = RowBatch::default();
    fill(&mut batch)?;
    if batch.len() < BATCH_ROWS || parsers < 2 {
        loop {
            add(&mut listing, reader.read(&batch));
            if batch.len() < BATCH_ROWS {
                return Ok(listing);
            }
            batch.clear();
            fill(&mut batch)?;
        }
    }
    std::thread::scope(|scope| {
        // Up to one batch waiting per parser; each parser takes the next one waiting,
        // and sends it back, parsed, with its place.
        let (to_parse, waiting) = mpsc::sync_channel::<(usize, RowBatch)>(parsers);
        let waiting = Arc::new(Mutex::new(waiting));
        let (to_add, parsed) = mpsc::channel::<Parsed>();
        for _ in 0..parsers {
            let waiting = Arc::clone(&waiting);
            let to_add = to_add.clone();
            scope.spawn(move || parse(reader, &waiting, &to_add));
        }
        // The parsers hold the only ones left: when every parser has stopped, a send
        // fails instead of waiting for ever.
        drop((waiting, to_add));
        let mut in_order = InOrder::default();
        // Batches parsed, emptied for the next rows (their room kept).
        let mut spare = Vec::new();
        let mut sent = 0;
        loop {
            let last = batch.len() < BATCH_ROWS;
            if to_parse.send((sent, batch)).is_err() {
                break; // a parser panicked: the scope raises it
            }
            sent += 1;
            while let Ok(parsed) = parsed.try_recv() {
                spare.push(in_order.add(parsed, &mut listing));
            }
            if last {
                break;
            }
            batch = spare.pop().unwrap_or_default();
            fill(&mut batch)?;
        }
        drop(to_parse);
        for parsed in parsed {
            in_order.add(parsed, &mut listing);
        }
        Ok(listing)
    })
}

/// A batch parsed: its place in the listing, what it read, and the batch itself.
type Parsed = (usize, Listing, RowBatch);

/// A parsing thread: each batch waiting, read by `reader` and sent on with its place,
/// until no more come or nobody takes them.
fn parse(
    reader: &RowReader<'_>,
    waiting: &Mutex<Receiver<(usize, RowBatch)>>,
    to_add: &mpsc::Sender<Parsed>,
) {
    loop {
        // Held only while waiting for a batch, never while parsing one.
        let next = waiting.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((at, mut batch)) = next else {
            return;
        };
        let read = reader.read(&batch);
        batch.clear();
        if to_add.send((at, read, batch)).is_err() {
            return;
        }
    }
}

/// Parsed batches put back in the order they were read.
#[derive(Debug, Default)]
struct InOrder {
    /// The place of the next batch to add.
    next: usize,
    /// Batches parsed before one read earlier.
    early: BTreeMap<usize, Listing>,
}

impl InOrder {
    /// A batch parsed: added to `listing` with every batch after it that was waiting
    /// for it, or kept until the batches before it are. The batch, emptied, is the
    /// answer.
    fn add(&mut self, (at, read, batch): Parsed, listing: &mut Listing) -> RowBatch {
        self.early.insert(at, read);
        while let Some(read) = self.early.remove(&self.next) {
            add(listing, read);
            self.next += 1;
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_core::{Error, ErrorKind, JobId, JobRecord, JobSpec, RemotePath};

    /// Row `at`: its id and its record's JSON.
    fn row(at: usize) -> (String, Vec<u8>) {
        let id = JobId::parse(&format!("row-{at:05}")).unwrap();
        let spec = JobSpec::new("row", "true");
        let results = RemotePath::parse("/results").unwrap();
        let record = JobRecord::new(id.clone(), &spec, results).unwrap();
        (id.to_string(), serde_json::to_vec(&record).unwrap())
    }

    /// The listing of the rows `fill` reads, of a store named "a test" keeping nothing,
    /// on `parsers` threads.
    fn listed(parsers: usize, fill: impl FnMut(&mut RowBatch) -> Result<()>) -> Result<Listing> {
        let (cache, filter) = (ReadCache::default(), RecordFilter::any());
        let reader = RowReader {
            cache: &cache,
            origin: "a test",
            filter: &filter,
        };
        list_rows(&reader, parsers, fill)
    }

    #[test]
    fn a_failure_to_read_rows_ends_the_listing_with_it_on_any_number_of_threads() {
        for parsers in [1, 2, 4] {
            let mut filled = 0;
            let answer = listed(parsers, |batch| {
                if filled == 3 {
                    let gone = std::io::Error::other("the database went away");
                    return Err(Error::io("reading rows", gone));
                }
                for at in filled * BATCH_ROWS..(filled + 1) * BATCH_ROWS {
                    let (id, body) = row(at);
                    batch.push(&id, 1, &body);
                }
                filled += 1;
                Ok(())
            });
            let error = answer.unwrap_err();
            assert!(error.to_string().contains("went away"), "{error}");
        }
    }

    #[test]
    fn a_body_that_is_not_utf8_is_an_unreadable_record_and_the_others_are_listed() {
        let (first, first_body) = row(0);
        let (last, last_body) = row(2);
        let mut once = false;
        let listing = listed(2, |batch| {
            if !std::mem::replace(&mut once, true) {
                batch.push(&first, 1, &first_body);
                batch.push(
                    "row-00001",
                    1,
                    b"{\"schema_version\": 5, \"id\": \"row-\xff\"}",
                );
                batch.push(&last, 1, &last_body);
            }
            Ok(())
        })
        .unwrap();
        let ids: Vec<&str> = listing.records.iter().map(|r| r.id().as_str()).collect();
        assert_eq!(ids, [first.as_str(), last.as_str()]);
        assert_eq!(listing.unreadable.len(), 1, "{:?}", listing.unreadable);
        let error = &listing.unreadable[0];
        assert_eq!(error.kind(), ErrorKind::CorruptRecord, "{error}");
        assert!(error.to_string().contains("row-00001 in a test"), "{error}");
    }
}
