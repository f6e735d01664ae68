//! What a caller hears of a submit's code upload: how much of the tree was sent
//! ([`CodeSent`]) and the callback told so ([`CodeProgress`]).

use std::sync::Arc;

/// How much of a code tree a submit has sent so far (for a progress bar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeSent {
    /// Bytes of the objects sent so far.
    pub sent_bytes: u64,
    /// Bytes of the objects the cluster lacked (what this submit sends in all).
    pub missing_bytes: u64,
    /// Objects sent so far.
    pub sent_objects: usize,
    /// Objects the cluster lacked.
    pub missing_objects: usize,
}

/// Called as a submit sends its code tree: first with nothing sent (once the missing
/// objects are known), then after each archive.
pub(crate) type CodeProgress = Arc<dyn Fn(CodeSent) + Send + Sync>;
