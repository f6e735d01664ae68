//! A poll's request to `poll.sh` as a poll memo holds it: what the poll asks, which a
//! repeated poll sends again as it is. The poll's protocol (`poll/request.rs`) builds
//! it.

use crate::slurm::scripts::POLL;
use crate::transport::Command;

/// A poll's request to `poll.sh` but its memo (the third parameter, named per run):
/// the same records make the same request, which a repeated poll sends again as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PollRequest {
    /// The script's parameters, the memo left out.
    params: Vec<String>,
    /// The lists of jobs and keys.
    stdin: Vec<u8>,
    /// The lists' name in a memo: the start of their SHA-256, in hex.
    lists: String,
    /// Whether every group asks squeue for the user's own jobs: only then does the
    /// script keep squeue's rows for the next poll.
    pub(crate) memo_able: bool,
}

impl PollRequest {
    /// The request of the script's `params` (the memo left out) and its lists of jobs
    /// and keys (`stdin`), named `lists` in a memo; `memo_able` when every group asks
    /// squeue for the user's own jobs.
    pub(crate) fn new(
        params: Vec<String>,
        stdin: Vec<u8>,
        lists: String,
        memo_able: bool,
    ) -> PollRequest {
        PollRequest {
            params,
            stdin,
            lists,
            memo_able,
        }
    }

    /// The command of this request, its lists on standard input, with `memo` (a memo's
    /// word, `CLIENT:HELD:WRITE`, to which the lists' name is added; none: `-`) as the
    /// script's memo.
    pub(crate) fn command(&self, memo: Option<String>) -> Command {
        self.command_without_lists(memo).stdin(self.stdin.clone())
    }

    /// The command of this request sent again under `memo` (`CLIENT:HELD:WRITE`): the
    /// login node kept its lists, so none travel.
    pub(crate) fn command_again(&self, memo: String) -> Command {
        self.command_without_lists(Some(memo))
    }

    /// The command of this request with `memo` as the script's memo, no lists on
    /// standard input.
    fn command_without_lists(&self, memo: Option<String>) -> Command {
        let mut params = self.params.clone();
        let memo = memo.map_or_else(|| "-".to_string(), |word| format!("{word}:{}", self.lists));
        params.insert(2, memo);
        POLL.command(params)
    }
}
