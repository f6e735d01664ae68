//! The library's log during the soak: to a file, and counted by message (reconnects,
//! reconciles, back-offs) for the report.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Counts the library's log events by message.
#[derive(Clone, Default)]
pub struct EventCounts(Arc<Mutex<BTreeMap<String, u64>>>);

struct MessageOf(String);

impl Visit for MessageOf {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventCounts {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let target = event.metadata().target();
        if !(target.starts_with("slurm_ssh") || target.starts_with("slurm_core")) {
            return;
        }
        let mut message = MessageOf(String::new());
        event.record(&mut message);
        *self
            .0
            .lock()
            .expect("counts lock")
            .entry(message.0)
            .or_default() += 1;
    }
}

impl EventCounts {
    /// How many events carried `message`.
    pub fn get(&self, message: &str) -> u64 {
        self.0
            .lock()
            .expect("counts lock")
            .get(message)
            .copied()
            .unwrap_or(0)
    }
}

/// Install the process's logger: INFO and above to a file in the temporary folder, every
/// event of the library counted. The counts, and the file's path.
pub fn install() -> (EventCounts, PathBuf) {
    let counts = EventCounts::default();
    let path = std::env::temp_dir().join(format!("slurm-run-soak-{}.log", std::process::id()));
    let file = std::fs::File::create(&path).expect("create the soak log");
    let subscriber = tracing_subscriber::registry().with(counts.clone()).with(
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Mutex::new(file))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
    );
    tracing::subscriber::set_global_default(subscriber).expect("install the soak's logger");
    (counts, path)
}
