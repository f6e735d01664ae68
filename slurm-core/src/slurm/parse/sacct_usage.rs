//! sacct's usage columns, as the poll reads them at the end of each line (`Elapsed`,
//! `Timelimit`, `AllocTRES`, `MaxRSS`, `TRESUsageInAve`): a [`RowUsage`] per row, each
//! figure `None` where the cluster printed nothing for it.

/// The usage columns the poll's sacct prints after `Eligible`, in order.
pub(crate) const USAGE_FIELDS: &[&str] = &[
    "Elapsed",
    "Timelimit",
    "AllocTRES",
    "MaxRSS",
    "TRESUsageInAve",
];

/// What one sacct row says a job, component or step used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RowUsage {
    /// `Elapsed`, in seconds.
    pub elapsed_s: Option<u64>,
    /// `Timelimit`, in seconds (`UNLIMITED`, `Partition_Limit`, empty: `None`).
    pub time_limit_s: Option<u64>,
    /// `gres/gpu` of `AllocTRES` (absent where the cluster does not account GPUs).
    pub gpus: Option<u32>,
    /// `cpu` of `AllocTRES`.
    pub cpus: Option<u32>,
    /// `MaxRSS`, in bytes (step rows; empty on a job's own row).
    pub max_rss_bytes: Option<u64>,
    /// `gres/gpuutil` of `TRESUsageInAve`, percent.
    pub gpu_util_percent: Option<u32>,
    /// `gres/gpumem` of `TRESUsageInAve`, in bytes.
    pub gpu_mem_bytes: Option<u64>,
}

impl RowUsage {
    /// The row's usage from its five usage fields (`fields`, in [`USAGE_FIELDS`]' order).
    pub(crate) fn parse(fields: &[&str]) -> RowUsage {
        let field = |i: usize| fields.get(i).map(|f| f.trim()).unwrap_or("");
        let alloc = field(2);
        let usage_in = field(4);
        RowUsage {
            elapsed_s: duration_s(field(0)),
            time_limit_s: duration_s(field(1)),
            gpus: tres(alloc, "gres/gpu").and_then(|v| v.parse().ok()),
            cpus: tres(alloc, "cpu").and_then(|v| v.parse().ok()),
            max_rss_bytes: bytes(field(3)),
            gpu_util_percent: tres(usage_in, "gres/gpuutil")
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| v.round().clamp(0.0, 100_000.0) as u32),
            gpu_mem_bytes: tres(usage_in, "gres/gpumem").and_then(bytes),
        }
    }
}

/// `D-HH:MM:SS`, `HH:MM:SS`, `MM:SS` in seconds; `UNLIMITED`, `Partition_Limit`, empty
/// and anything else: `None`.
fn duration_s(text: &str) -> Option<u64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let mut secs = 0u64;
    let parts: Vec<&str> = rest.split(':').collect();
    if parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    for part in &parts {
        // Elapsed may carry fractions of a second on some releases (`00:00:01.234`).
        let whole = part.split('.').next()?;
        secs = secs * 60 + whole.parse::<u64>().ok()?;
    }
    if parts.len() == 1 {
        secs *= 60; // a lone number is minutes, as Slurm reads `--time`.
    }
    Some(days * 86_400 + secs)
}

/// The value of `key` in a TRES list (`billing=2,cpu=2,gres/gpu=4,mem=1000M,node=2`).
fn tres<'a>(list: &'a str, key: &str) -> Option<&'a str> {
    list.split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A size as sacct prints it (`1234`, `2340K`, `1.5M`, `3G`: powers of 1024) in bytes.
fn bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let (number, scale) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&text[..i], 1 << 20),
        (i, 'G' | 'g') => (&text[..i], 1 << 30),
        (i, 'T' | 't') => (&text[..i], 1 << 40),
        (i, 'P' | 'p') => (&text[..i], 1 << 50),
        _ => (text, 1),
    };
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| (value * scale as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::RowUsage;

    #[test]
    fn a_job_row_gives_times_and_allocation_and_a_step_row_memory() {
        let job = RowUsage::parse(&[
            "00:01:05",
            "01:00:00",
            "billing=4,cpu=4,gres/gpu=4,mem=2000M,node=2",
            "",
            "",
        ]);
        assert_eq!(job.elapsed_s, Some(65));
        assert_eq!(job.time_limit_s, Some(3600));
        assert_eq!(job.gpus, Some(4));
        assert_eq!(job.cpus, Some(4));
        assert_eq!(job.max_rss_bytes, None);
        let step = RowUsage::parse(&[
            "1-00:00:01",
            "",
            "cpu=2,mem=1000M,node=1",
            "2340K",
            "cpu=00:00:01,energy=0,fs/disk=2113,gres/gpumem=1G,gres/gpuutil=87,mem=2340K",
        ]);
        assert_eq!(step.elapsed_s, Some(86_401));
        assert_eq!(step.time_limit_s, None);
        assert_eq!(
            step.gpus, None,
            "a TRES list without gres/gpu accounts no GPUs"
        );
        assert_eq!(step.max_rss_bytes, Some(2340 * 1024));
        assert_eq!(step.gpu_util_percent, Some(87));
        assert_eq!(step.gpu_mem_bytes, Some(1 << 30));
    }

    #[test]
    fn unlimited_and_empty_fields_read_as_none_never_zero() {
        let row = RowUsage::parse(&["", "UNLIMITED", "", "", ""]);
        assert_eq!(row, RowUsage::default());
        assert_eq!(
            RowUsage::parse(&["00:00:00", "Partition_Limit"]).time_limit_s,
            None
        );
        assert_eq!(RowUsage::parse(&[]).elapsed_s, None);
        assert_eq!(RowUsage::parse(&["00:00:00"]).elapsed_s, Some(0));
        assert_eq!(RowUsage::parse(&["02:03"]).elapsed_s, Some(123), "MM:SS");
    }
}
