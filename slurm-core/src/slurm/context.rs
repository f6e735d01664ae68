//! What an operation of the SLURM backend works with, borrowed from the backend: the
//! transport, the renderer, the record store, the configuration, what was learnt of the
//! cluster, the secrets it submitted, and the locks that make concurrent first submits
//! run preflight and the NCCL probe decision once.
//!
//! Operations are free functions of their own modules taking a [`Context`]; a module
//! that needs another's work imports it, so the module graph (`tests/rooms.rs`) sees
//! every call between them. The state the context carries is defined below it, in its
//! children, which import no operation: every operation depends on the context, and the
//! context on none of them.
//!
//! | file | holds |
//! |---|---|
//! | `context.rs` | [`Context`], its locks and hooks |
//! | `poll_memo.rs` | the memo of a poll repeated over the same jobs |
//! | `poll_request.rs` | a poll's request as the memo holds it and sends again |
//! | `code_progress.rs` | what a caller hears of a code tree's upload |

pub(super) mod code_progress;
pub(super) mod poll_memo;
pub(super) mod poll_request;

use self::code_progress::CodeProgress;
use self::poll_memo::PollMemo;
use super::config::SlurmConfig;
use super::facts::ClusterFacts;
use super::secrets::SecretMemory;
use crate::record::AsyncStore;
use crate::render::Renderer;
use crate::transport::Transport;

/// The locks of one backend (shared by its clones).
#[derive(Debug, Default)]
pub(super) struct Locks {
    /// Held while the base preflight runs, so concurrent first submits run it once.
    pub(super) preflight: tokio::sync::Mutex<()>,
    /// Held while a submit decides on (and maybe queues) an NCCL probe, so concurrent
    /// submits share one probe.
    pub(super) probe: tokio::sync::Mutex<()>,
    /// Held while a submit decides on (and maybe queues) an image's conversion, so
    /// concurrent first submits of one image share one conversion job.
    pub(super) conversion: tokio::sync::Mutex<()>,
}

/// What a caller asked to hear about as operations go (shared by a backend's clones).
#[derive(Default)]
pub(super) struct Hooks {
    /// Told how a code tree's upload goes.
    code_progress: std::sync::RwLock<Option<CodeProgress>>,
}

impl Hooks {
    /// The code upload's progress callback, if one was set.
    pub(super) fn code_progress(&self) -> Option<CodeProgress> {
        self.code_progress.read().expect("hooks lock").clone()
    }

    /// Set (or clear) the code upload's progress callback.
    pub(super) fn set_code_progress(&self, callback: Option<CodeProgress>) {
        *self.code_progress.write().expect("hooks lock") = callback;
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("code_progress", &self.code_progress().is_some())
            .finish()
    }
}

/// The parts of one backend an operation works with.
#[derive(Clone, Copy)]
pub(super) struct Context<'a> {
    transport: &'a dyn Transport,
    renderer: &'a dyn Renderer,
    records: &'a AsyncStore,
    config: &'a SlurmConfig,
    facts: &'a ClusterFacts,
    secrets: &'a SecretMemory,
    locks: &'a Locks,
    hooks: &'a Hooks,
    memo: &'a PollMemo,
}

impl<'a> Context<'a> {
    /// The context over these parts (one argument per part, as the backend owns them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        transport: &'a dyn Transport,
        renderer: &'a dyn Renderer,
        records: &'a AsyncStore,
        config: &'a SlurmConfig,
        facts: &'a ClusterFacts,
        secrets: &'a SecretMemory,
        locks: &'a Locks,
        hooks: &'a Hooks,
        memo: &'a PollMemo,
    ) -> Self {
        Context {
            transport,
            renderer,
            records,
            config,
            facts,
            secrets,
            locks,
            hooks,
            memo,
        }
    }

    /// What the backend's last quiet poll answered (see [`PollMemo`]).
    pub(super) fn poll_memo(&self) -> &'a PollMemo {
        self.memo
    }

    /// What the caller asked to hear about.
    pub(super) fn hooks(&self) -> &'a Hooks {
        self.hooks
    }

    /// Where commands run.
    pub(super) fn transport(&self) -> &'a dyn Transport {
        self.transport
    }

    /// How batch scripts are written.
    pub(super) fn renderer(&self) -> &'a dyn Renderer {
        self.renderer
    }

    /// Where records live, each call off the runtime's threads.
    pub(super) fn records(&self) -> &'a AsyncStore {
        self.records
    }

    /// The backend's configuration.
    pub(super) fn config(&self) -> &'a SlurmConfig {
        self.config
    }

    /// What was learnt of the cluster.
    pub(super) fn facts(&self) -> &'a ClusterFacts {
        self.facts
    }

    /// The secrets this backend submitted (memory only).
    pub(super) fn secrets(&self) -> &'a SecretMemory {
        self.secrets
    }

    /// The backend's locks.
    pub(super) fn locks(&self) -> &'a Locks {
        self.locks
    }
}

/// An owner of a backend's parts that outlives one call (a followed log's stream): the
/// backend's shared state, its type parameters erased.
pub(super) trait ContextOwner: Send + Sync {
    /// The context over the owner's parts.
    fn context(&self) -> Context<'_>;
}
