//! The memo of a poll repeated over the same jobs (a watch): what lets a poll in which
//! nothing changed cost squeue and a comparison, with no work per job on either side.
//!
//! The client side: a backend keeps what its last *quiet* poll answered ([`Held`]: the
//! ids, the store's [`revision`](crate::RecordStore::revision) they were read at, the
//! request, the statuses). A poll is quiet when it wrote nothing, asked nothing beyond
//! squeue (no sacct, scontrol or follow-up) and depends on nothing but the records and
//! squeue's rows (no submit to settle, no dependant, no verdict to read): the same
//! records and the same rows then give the same statuses. The login-node side
//! (`poll.sh`): squeue's rows of each quiet poll are kept in the long-lived shell's
//! private folder, in one of the client's two [`Slot`]s, beside the request's lists of
//! jobs. A poll of the same ids at the same revision sends the held request again
//! without its lists, naming the slot it holds; squeue's rows are written to the other
//! slot and compared byte for byte, and when they are the same the answer is one line
//! (`@@memo same`) and the held statuses are the poll's. Otherwise the same round trip
//! goes on as a full poll, with the lists kept.
//!
//! A new shell (a reconnect) keeps no lists: it answers `@@memo lost`, and the client
//! sends the full request. Only a backend's one poll at a time uses its memo (others
//! poll in full), so a slot is written by one poll at a time, and never while the
//! client holds it.

use crate::backend::JobStatus;
use crate::record::JobId;
use crate::transport::Output;
use crate::{Error, Result};

use super::poll_request::PollRequest;

/// One of a client's two places for squeue's rows on the login node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    A,
    B,
}

impl Slot {
    fn word(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }

    /// The slot that is not this one.
    pub(crate) fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }
}

/// What one poll asks of the script's memo (its third parameter, `CLIENT:HELD:WRITE`,
/// to which the request adds its lists' name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemoAsk {
    client: String,
    held: Option<Slot>,
    write: Slot,
}

impl MemoAsk {
    /// The script's parameter.
    pub(crate) fn word(&self) -> String {
        let held = self.held.map_or("-", Slot::word);
        format!("{}:{held}:{}", self.client, self.write.word())
    }

    /// The slot this poll's rows are written to.
    #[cfg(test)]
    pub(super) fn write(&self) -> Slot {
        self.write
    }
}

/// What the script answered of its memo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoAnswer {
    /// squeue's rows are those of the slot held: the held statuses are this poll's.
    Same,
    /// A full answer follows; its squeue rows were kept in this slot.
    Kept(Slot),
    /// A full answer follows; nothing was kept.
    Nothing,
    /// The login node keeps no lists of the request sent again (a new shell): nothing
    /// was asked, and the client asks again with its lists.
    Lost,
}

/// The memo's line of `output` (a poll that named a memo), taken off it: the whole
/// answer (`@@memo same`, `@@memo lost`), or the last line of a full one.
pub(crate) fn take_answer(output: &mut Output) -> Result<MemoAnswer> {
    let text = output.stdout.strip_suffix(b"\n").unwrap_or(&output.stdout);
    let start = text
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    let line = String::from_utf8_lossy(&text[start..]).into_owned();
    let answer = match line.as_str() {
        "@@memo same" if start == 0 => MemoAnswer::Same,
        "@@memo lost" if start == 0 => MemoAnswer::Lost,
        "@@memo kept a" => MemoAnswer::Kept(Slot::A),
        "@@memo kept b" => MemoAnswer::Kept(Slot::B),
        "@@memo none" => MemoAnswer::Nothing,
        _ => {
            return Err(Error::parse(
                "poll output",
                format!("expected the memo's line last, found `{line}`"),
            ))
        }
    };
    output.stdout.truncate(start);
    Ok(answer)
}

/// A backend's memo: its name on the login node and what its last quiet poll answered.
#[derive(Debug)]
pub(crate) struct PollMemo {
    /// Names this backend's slots (random: backends sharing a shell keep apart).
    client: String,
    held: tokio::sync::Mutex<Option<Held>>,
}

impl Default for PollMemo {
    fn default() -> Self {
        PollMemo {
            client: format!("{:016x}", rand::random::<u64>()),
            held: tokio::sync::Mutex::new(None),
        }
    }
}

/// What a quiet poll answered, and what it asked.
#[derive(Debug)]
pub(crate) struct Held {
    ids: Vec<JobId>,
    revision: u64,
    slot: Slot,
    request: PollRequest,
    statuses: Vec<JobStatus>,
}

impl Held {
    /// What a quiet poll of `ids` at `revision` answered (`statuses`) after asking
    /// `request`, its rows kept in `slot`.
    pub(crate) fn new(
        ids: &[JobId],
        revision: u64,
        slot: Slot,
        request: PollRequest,
        statuses: Vec<JobStatus>,
    ) -> Held {
        Held {
            ids: ids.to_vec(),
            revision,
            slot,
            request,
            statuses,
        }
    }

    /// Whether this answers a poll of `ids` at `revision`.
    pub(crate) fn answers(&self, ids: &[JobId], revision: u64) -> bool {
        self.revision == revision && self.ids == ids
    }

    /// The slot the login node kept its rows in.
    pub(crate) fn slot(&self) -> Slot {
        self.slot
    }

    /// The request to send again.
    pub(crate) fn request(&self) -> &PollRequest {
        &self.request
    }

    /// The statuses it answered.
    pub(crate) fn statuses(&self) -> &[JobStatus] {
        &self.statuses
    }
}

/// A backend's memo while one poll uses it.
pub(crate) type MemoGuard<'a> = tokio::sync::MutexGuard<'a, Option<Held>>;

impl PollMemo {
    /// The memo, unless another poll of this backend is using it (that poll's answer
    /// will replace it; this one polls in full).
    pub(crate) fn try_take(&self) -> Option<MemoGuard<'_>> {
        self.held.try_lock().ok()
    }

    /// What a poll asks of the script: compare with the slot `held` (when the client
    /// holds one), write the other.
    pub(crate) fn ask(&self, held: Option<Slot>) -> MemoAsk {
        MemoAsk {
            client: self.client.clone(),
            held,
            write: held.map_or(Slot::A, Slot::other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_line_is_taken_off_the_end_of_the_output() {
        let mut output = Output {
            stdout: b"@@begin 0\n@@end 0 0\n@@memo kept b\n".to_vec(),
            ..Output::default()
        };
        assert_eq!(take_answer(&mut output).unwrap(), MemoAnswer::Kept(Slot::B));
        assert_eq!(output.stdout, b"@@begin 0\n@@end 0 0\n");
        let mut same = Output {
            stdout: b"@@memo same\n".to_vec(),
            ..Output::default()
        };
        assert_eq!(take_answer(&mut same).unwrap(), MemoAnswer::Same);
        let mut lost = Output {
            stdout: b"@@memo lost\n".to_vec(),
            ..Output::default()
        };
        assert_eq!(take_answer(&mut lost).unwrap(), MemoAnswer::Lost);
        let mut late_same = Output {
            stdout: b"@@begin 0\n@@end 0 0\n@@memo same\n".to_vec(),
            ..Output::default()
        };
        assert!(
            take_answer(&mut late_same).is_err(),
            "`same` is a whole answer"
        );
        let mut other = Output {
            stdout: b"@@begin 0\n@@end 0 0\n".to_vec(),
            ..Output::default()
        };
        assert!(take_answer(&mut other).is_err(), "no memo line: an error");
    }

    #[test]
    fn a_poll_writes_the_slot_it_does_not_hold() {
        let memo = PollMemo::default();
        assert_eq!(memo.ask(None).write(), Slot::A);
        assert_eq!(memo.ask(Some(Slot::A)).write(), Slot::B);
        assert_eq!(memo.ask(Some(Slot::B)).write(), Slot::A);
        let word = memo.ask(Some(Slot::B)).word();
        assert!(word.ends_with(":b:a"), "{word}");
        assert!(memo.ask(None).word().ends_with(":-:a"));
        assert_ne!(
            PollMemo::default().client,
            memo.client,
            "each backend names its own slots"
        );
    }
}
