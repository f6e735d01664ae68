//! Usage and timelines drawn as standalone SVG documents: GPU-hours by day, stacked by
//! group ([`usage_svg`]), and each job's wait and run on one time axis
//! ([`timeline_svg`]).
//!
//! The SVG is written by hand, not with a plotting crate: plotters needs a font stack
//! for text metrics, and these pictures only place rectangles and text at fixed sizes
//! (a viewer lays out the text).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use chrono::{DateTime, Duration, Utc};

use crate::record::{JobRecord, SegmentEnd, TaskRecord};
use crate::state::JobState;

use super::summary::{day_of, GroupBy};

/// The colours of the groups, in turn (a colour-blind-safe palette).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Text made safe for SVG content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// The opening of a document `width` x `height` with a white ground (no rectangle).
fn open(width: f64, height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\" \
         style=\"background:#ffffff\">\n"
    )
}

/// A step for about four ticks up to `max`: 1, 2, 2.5 or 5 times a power of ten.
fn tick_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 4.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// A tick's label: no decimals for whole numbers.
fn tick_label(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

/// GPU-hours by day (UTC, of each record's start, else its opening), one bar per day
/// stacked by the groups of `by`, each group its own colour in the legend. Records
/// without a GPU figure are drawn nowhere; a footnote counts them.
pub fn usage_svg(records: &[JobRecord], by: &GroupBy) -> String {
    // Hours by day, then by group.
    let mut days: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut groups: BTreeSet<String> = BTreeSet::new();
    let mut without = 0u64;
    for record in records {
        match record.usage_total().and_then(|u| u.gpu_hours()) {
            Some(hours) => {
                let group = by.key_of(record);
                *days
                    .entry(day_of(record))
                    .or_default()
                    .entry(group.clone())
                    .or_default() += hours;
                groups.insert(group);
            }
            None => without += 1,
        }
    }
    let colour: BTreeMap<&str, &str> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.as_str(), PALETTE[i % PALETTE.len()]))
        .collect();
    let max = days
        .values()
        .map(|g| g.values().sum::<f64>())
        .fold(0.0, f64::max);
    let step = tick_step(max);
    let top = (max / step).ceil().max(1.0) * step;

    let (left, plot_top, plot_h) = (70.0, 50.0, 300.0);
    let slot = (600.0 / days.len().max(1) as f64).clamp(24.0, 80.0);
    let plot_w = slot * days.len().max(1) as f64;
    let legend_x = left + plot_w + 30.0;
    let legend_w = 30.0 + 7.0 * groups.iter().map(|g| g.chars().count()).max().unwrap_or(0) as f64;
    let width = legend_x + legend_w.max(120.0);
    let bottom = plot_top + plot_h;
    let height = bottom + 110.0;
    let y_of = |hours: f64| bottom - hours / top * plot_h;

    let mut svg = open(width, height);
    let title = match by {
        GroupBy::Day => "GPU-hours by day".to_string(),
        other => format!("GPU-hours by day and {other}"),
    };
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}</text>",
        escape(&title)
    );
    // The y axis: a grid line and a label per tick.
    let ticks = (top / step).round() as u32;
    for i in 0..=ticks {
        let value = f64::from(i) * step;
        let y = y_of(value);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#dddddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + plot_w,
            left - 6.0,
            y + 4.0,
            tick_label(value)
        );
    }
    let _ = writeln!(
        svg,
        "<text transform=\"translate(18 {:.1}) rotate(-90)\" text-anchor=\"middle\">GPU-hours</text>",
        plot_top + plot_h / 2.0
    );
    // The bars: one rectangle per group of a day, stacked from the axis up.
    for (i, (day, by_group)) in days.iter().enumerate() {
        let x = left + slot * i as f64 + slot * 0.15;
        let mut base = 0.0;
        for (group, hours) in by_group {
            let (y0, y1) = (y_of(base), y_of(base + hours));
            let fill = colour.get(group.as_str()).copied().unwrap_or(PALETTE[0]);
            let _ = writeln!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\">\
                 <title>{} {}: {} GPU-hours</title></rect>",
                slot * 0.7,
                (y0 - y1).max(0.0),
                escape(day),
                escape(group),
                super::format_hours(*hours)
            );
            base += hours;
        }
        let cx = x + slot * 0.35;
        let _ = writeln!(
            svg,
            "<text transform=\"translate({cx:.1} {:.1}) rotate(-45)\" text-anchor=\"end\">{}</text>",
            bottom + 14.0,
            escape(day)
        );
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{plot_top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"#333333\"/>\n\
         <line x1=\"{left}\" y1=\"{bottom}\" x2=\"{:.1}\" y2=\"{bottom}\" stroke=\"#333333\"/>",
        left + plot_w
    );
    if days.is_empty() {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666666\">no GPU accounting to draw</text>",
            left + plot_w / 2.0,
            plot_top + plot_h / 2.0
        );
    }
    // The legend: a swatch (a circle, so rectangles are bars only) and the group.
    let _ = writeln!(
        svg,
        "<text x=\"{legend_x:.1}\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
        plot_top,
        escape(&by.to_string())
    );
    for (i, group) in groups.iter().enumerate() {
        let y = plot_top + 20.0 + 18.0 * i as f64;
        let fill = colour.get(group.as_str()).copied().unwrap_or(PALETTE[0]);
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            legend_x + 6.0,
            y - 4.0,
            legend_x + 18.0,
            y,
            escape(group)
        );
    }
    if without > 0 {
        let _ = writeln!(
            svg,
            "<text x=\"{left}\" y=\"{:.1}\" fill=\"#666666\">{without} record(s) without GPU accounting</text>",
            height - 12.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// How a lane's run ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Complete,
    Failed,
    Stopped,
    Running,
    Waiting,
}

impl Outcome {
    fn colour(self) -> &'static str {
        match self {
            Outcome::Complete => "#59a14f",
            Outcome::Failed => "#e15759",
            Outcome::Stopped => "#f28e2b",
            Outcome::Running => "#4e79a7",
            Outcome::Waiting => "#bbbbbb",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Failed => "error",
            Outcome::Stopped => "canceled, timed out or preempted",
            Outcome::Running => "running (to now)",
            Outcome::Waiting => "waiting",
        }
    }

    fn of_state(state: JobState) -> Outcome {
        match state {
            JobState::Complete => Outcome::Complete,
            JobState::Error => Outcome::Failed,
            JobState::Canceled | JobState::NotSubmitted => Outcome::Stopped,
            JobState::Running => Outcome::Running,
            JobState::Submitting | JobState::Pending | JobState::Unknown => Outcome::Waiting,
        }
    }

    fn of_segment(end: Option<SegmentEnd>) -> Outcome {
        match end {
            None => Outcome::Running,
            Some(SegmentEnd::Done) => Outcome::Complete,
            Some(SegmentEnd::Failed) => Outcome::Failed,
            Some(_) => Outcome::Stopped,
        }
    }
}

/// One lane of the timeline: a label, when it was submitted, started and ended.
struct Lane {
    label: String,
    submitted: Option<DateTime<Utc>>,
    started: Option<DateTime<Utc>>,
    ended: Option<DateTime<Utc>>,
    outcome: Outcome,
}

/// When the scheduler first took the record's job (its first PENDING), where history
/// tells it.
fn first_in(record: &JobRecord, state: JobState) -> Option<DateTime<Utc>> {
    record
        .history()
        .iter()
        .find(|t| t.state == state)
        .map(|t| t.at)
}

/// When the record's job ended, by its history.
fn ended_in_history(record: &JobRecord) -> Option<DateTime<Utc>> {
    record
        .history()
        .iter()
        .rev()
        .find(|t| t.state.is_terminal())
        .map(|t| t.at)
}

/// A task's or role's lane: its accounting's start and elapsed time, else the record's
/// times and the task's last change.
fn task_lane(record: &JobRecord, label: String, task: &TaskRecord) -> Lane {
    let timeline = record.timeline();
    let submitted = timeline
        .submitted_at
        .or_else(|| first_in(record, JobState::Pending));
    let usage = task.usage();
    let started = usage
        .and_then(|u| u.started_at)
        .or(timeline.started_at)
        .or_else(|| (task.state() == JobState::Running).then(|| task.updated_at()));
    let ended = usage
        .and_then(|u| Some(u.started_at? + Duration::seconds(i64::try_from(u.elapsed_s?).ok()?)))
        .or_else(|| task.state().is_terminal().then(|| task.updated_at()));
    Lane {
        label,
        submitted,
        started,
        ended,
        outcome: Outcome::of_state(task.state()),
    }
}

/// The lanes of a record: one per segment of a resumed run, per array task, per role,
/// or the record itself.
fn lanes_of(record: &JobRecord) -> Vec<Lane> {
    let id = record.id().to_string();
    let timeline = record.timeline();
    if !record.segments().is_empty() {
        return record
            .segments()
            .iter()
            .enumerate()
            .map(|(i, s)| Lane {
                label: format!("{id} segment {}", i + 1),
                submitted: s.timeline().submitted_at.or_else(|| {
                    (i == 0)
                        .then(|| {
                            timeline
                                .submitted_at
                                .or_else(|| first_in(record, JobState::Pending))
                        })
                        .flatten()
                }),
                started: s.timeline().started_at.or(Some(s.started_at())),
                ended: s.timeline().ended_at.or(s.ended_at()),
                outcome: Outcome::of_segment(s.ended()),
            })
            .collect();
    }
    if !record.tasks().is_empty() {
        return record
            .tasks()
            .iter()
            .map(|(index, task)| task_lane(record, format!("{id} task {index}"), task))
            .collect();
    }
    if !record.roles().is_empty() {
        return record
            .roles()
            .iter()
            .map(|(name, role)| task_lane(record, format!("{id} {name}"), role))
            .collect();
    }
    let usage = record.usage_total();
    vec![Lane {
        label: id,
        submitted: timeline
            .submitted_at
            .or_else(|| first_in(record, JobState::Pending)),
        started: timeline
            .started_at
            .or_else(|| usage.as_ref().and_then(|u| u.started_at))
            .or_else(|| first_in(record, JobState::Running)),
        ended: timeline.ended_at.or_else(|| ended_in_history(record)),
        outcome: Outcome::of_state(record.state()),
    }]
}

/// Each record's jobs on one time axis: a lane per segment of a resumed run, per array
/// task, per role, or the record itself, each a grey bar while it waited (submitted to
/// started) and a bar while it ran (started to ended), coloured by how it ended
/// (complete green, error red, canceled or timed out orange, running blue up to now).
/// Lanes without any time yet are listed under the chart.
pub fn timeline_svg(records: &[JobRecord]) -> String {
    timeline_svg_at(records, Utc::now())
}

/// [`timeline_svg`] with running lanes drawn up to `now`.
fn timeline_svg_at(records: &[JobRecord], now: DateTime<Utc>) -> String {
    let lanes: Vec<Lane> = records.iter().flat_map(lanes_of).collect();
    let (timed, untimed): (Vec<&Lane>, Vec<&Lane>) = lanes
        .iter()
        .partition(|l| l.submitted.is_some() || l.started.is_some() || l.ended.is_some());
    // A lane's end as drawn: its end, else now while it waits or runs.
    let end_of = |l: &Lane| {
        l.ended.unwrap_or(match l.outcome {
            Outcome::Running | Outcome::Waiting => now,
            _ => l.started.or(l.submitted).unwrap_or(now),
        })
    };
    let times: Vec<DateTime<Utc>> = timed
        .iter()
        .flat_map(|l| [l.submitted, l.started, Some(end_of(l))])
        .flatten()
        .collect();
    let t0 = times.iter().min().copied().unwrap_or(now);
    let t1 = times
        .iter()
        .max()
        .copied()
        .unwrap_or(now)
        .max(t0 + Duration::minutes(1));
    let span = (t1 - t0).num_milliseconds().max(1) as f64;

    let label_w = 8.0
        + 7.0
            * lanes
                .iter()
                .map(|l| l.label.chars().count())
                .max()
                .unwrap_or(10) as f64;
    let (left, plot_w, lane_h, top) = (label_w.max(120.0) + 10.0, 700.0, 22.0, 80.0);
    let x_of = |t: DateTime<Utc>| left + (t - t0).num_milliseconds() as f64 / span * plot_w;
    let axis_y = top + lane_h * timed.len() as f64 + 6.0;
    let height = axis_y + 50.0 + 18.0 * (untimed.len() + usize::from(!untimed.is_empty())) as f64;
    let width = left + plot_w + 30.0;

    let mut svg = open(width, height);
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Jobs over time</text>"
    );
    // The legend, in one row: a swatch (a circle) and a word per colour.
    let mut x = 10.0;
    for outcome in [
        Outcome::Waiting,
        Outcome::Running,
        Outcome::Complete,
        Outcome::Failed,
        Outcome::Stopped,
    ] {
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"46\" r=\"6\" fill=\"{}\"/><text x=\"{:.1}\" y=\"50\">{}</text>",
            x + 6.0,
            outcome.colour(),
            x + 16.0,
            outcome.word()
        );
        x += 30.0 + 7.0 * outcome.word().len() as f64;
    }
    for (i, lane) in timed.iter().enumerate() {
        let y = top + lane_h * i as f64;
        let _ = writeln!(
            svg,
            "<g class=\"lane\"><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            y + 14.0,
            escape(&lane.label)
        );
        let end = end_of(lane);
        if lane.started.is_none() && lane.ended.is_some() {
            // It ended, but when it started is not known: the whole span, faded.
            let from = lane.submitted.unwrap_or(end);
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" fill=\"{}\" \
                 fill-opacity=\"0.5\"><title>{}, start not known</title></rect>\n</g>",
                x_of(from),
                y + 3.0,
                (x_of(end) - x_of(from)).max(1.0),
                lane.outcome.colour(),
                lane.outcome.word()
            );
            continue;
        }
        let waited_until = lane.started.unwrap_or(end);
        if let Some(submitted) = lane.submitted.filter(|s| *s < waited_until) {
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" fill=\"{}\"><title>waited {}</title></rect>",
                x_of(submitted),
                y + 3.0,
                (x_of(waited_until) - x_of(submitted)).max(1.0),
                Outcome::Waiting.colour(),
                span_words(waited_until - submitted)
            );
        }
        if let Some(started) = lane.started {
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" fill=\"{}\"><title>{}, ran {}</title></rect>",
                x_of(started),
                y + 3.0,
                (x_of(end.max(started)) - x_of(started)).max(1.0),
                lane.outcome.colour(),
                lane.outcome.word(),
                span_words(end.max(started) - started)
            );
        }
        svg.push_str("</g>\n");
    }
    // The time axis: five ticks from the first time to the last.
    let _ = writeln!(
        svg,
        "<line x1=\"{left:.1}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"#333333\"/>",
        left + plot_w
    );
    let same_day = t0.date_naive() == t1.date_naive();
    for i in 0..=4 {
        let t = t0 + Duration::milliseconds((span * f64::from(i) / 4.0) as i64);
        let format = if same_day { "%H:%M" } else { "%m-%d %H:%M" };
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{axis_y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            axis_y + 5.0,
            axis_y + 18.0,
            t.format(format),
            x = x_of(t)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666666\">UTC</text>",
        left + plot_w / 2.0,
        axis_y + 34.0
    );
    if !untimed.is_empty() {
        let y = axis_y + 56.0;
        let _ = writeln!(
            svg,
            "<text x=\"10\" y=\"{y:.1}\" font-weight=\"bold\">no times yet:</text>"
        );
        for (i, lane) in untimed.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<text x=\"20\" y=\"{:.1}\">{}</text>",
                y + 18.0 * (i + 1) as f64,
                escape(&lane.label)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// A span in words: `45s`, `12m`, `3h 5m`, `2d 4h`.
fn span_words(d: Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        _ if s < 60 => format!("{s}s"),
        _ if s < 3600 => format!("{}m", s / 60),
        _ if s < 86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::summary::tests::{at, ended, gpu_run, record_of};
    use crate::record::{Segment, Timeline};

    #[test]
    fn one_rectangle_per_bar_segment_and_names_escaped() {
        // Names are checked in specs; one read from an older record may hold anything.
        let named = |name: &str, day, gpus| {
            let mut r = ended("n", &[], day, 0, Some(gpu_run(gpus, 3600)));
            r.name = name.to_string();
            r
        };
        let records = vec![
            named("a<b", 7, Some(4)),
            named("a<b", 7, Some(4)),
            named("c&d", 7, Some(2)),
            named("c&d", 8, Some(1)),
            named("cpu", 8, None),
            ended("lost", &[], 8, 0, None),
        ];
        let svg = usage_svg(&records, &GroupBy::Name);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        // Day 7: a<b (8 h) and c&d (2 h); day 8: c&d (1 h).
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(svg.contains("a&lt;b") && svg.contains("c&amp;d"));
        assert!(!svg.contains("a<b") && !svg.contains("c&d"));
        assert!(svg.contains("8.00 GPU-hours"));
        assert!(svg.contains("GPU-hours by day and name"));
        assert!(svg.contains("2026-12-07") && svg.contains("2026-12-08"));
        assert!(svg.contains("2 record(s) without GPU accounting"));
        // Ticks up to 10 hours: 0, 2.5, 5, 7.5, 10.
        assert!(svg.contains(">7.5</text>") && svg.contains(">10</text>"));
    }

    #[test]
    fn ticks_are_four_or_five_round_steps() {
        assert_eq!(tick_step(10.0), 2.5);
        assert_eq!(tick_step(7.0), 2.0);
        assert_eq!(tick_step(1000.0), 250.0);
        assert_eq!(tick_step(0.0), 1.0);
        for max in [0.3, 7.0, 13.0, 99.0, 480.0] {
            let ticks = (max / tick_step(max)).ceil();
            assert!((2.0..=4.0).contains(&ticks), "{max}: {ticks}");
        }
    }

    #[test]
    fn no_bars_without_figures_and_the_footnote_counts_them() {
        let records = vec![ended("x", &[], 7, 0, None)];
        let svg = usage_svg(&records, &GroupBy::Day);
        assert_eq!(svg.matches("<rect").count(), 0);
        assert!(svg.contains("1 record(s) without GPU accounting"));
        assert!(svg.contains("no GPU accounting to draw"));
    }

    #[test]
    fn a_lane_per_segment_task_and_role_and_none_for_times_not_known() {
        let mut resumed = record_of(
            "name: r\ncommand: x\ntime: \"01:00:00\"\nresume: {max_restarts: 3}\n",
            at(7, 0),
        );
        resumed.state = JobState::Complete;
        resumed.segments = vec![
            Segment {
                job: "1".into(),
                nodes: vec![],
                started_at: at(7, 10),
                ended_at: Some(at(7, 70)),
                ended: Some(SegmentEnd::Wall),
                checkpoint: None,
                timeline: Timeline::new(Some(at(7, 0)), None, Some(at(7, 10)), Some(at(7, 70))),
                usage: None,
            },
            Segment {
                job: "1".into(),
                nodes: vec![],
                started_at: at(7, 80),
                ended_at: Some(at(7, 100)),
                ended: Some(SegmentEnd::Done),
                checkpoint: None,
                timeline: Timeline::default(),
                usage: None,
            },
        ];
        let mut array =
            record_of("name: arr\ncommand: x\narray: {size: 3}\n", at(7, 0)).with_tasks([0, 1, 2]);
        array.timeline = Timeline::new(Some(at(7, 0)), None, None, None);
        for (i, state) in [JobState::Complete, JobState::Error, JobState::Running]
            .into_iter()
            .enumerate()
        {
            let task = array.tasks.get_mut(&(i as u32)).unwrap();
            task.state = state;
            task.updated_at = at(7, 20 + 10 * i as i64);
        }
        let roles = record_of(
            "name: rl\nroles:\n  learner: {command: a}\n  actor: {command: b}\n",
            at(7, 0),
        );
        let fresh = record_of("name: fresh\ncommand: x\n", at(7, 0));
        let svg = timeline_svg_at(
            &[resumed.clone(), array.clone(), roles.clone(), fresh.clone()],
            at(7, 120),
        );
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert_eq!(svg.matches("<g class=\"lane\">").count(), 2 + 3, "{svg}");
        assert!(svg.contains(&format!("{} segment 1", resumed.id())));
        assert!(svg.contains(&format!("{} segment 2", resumed.id())));
        for i in 0..3 {
            assert!(svg.contains(&format!("{} task {i}", array.id())));
        }
        // The roles and the fresh record were never taken by the scheduler: no times.
        assert!(svg.contains("no times yet"));
        assert!(svg.contains(&format!("{} learner", roles.id())));
        assert!(svg.contains(&format!("{} actor", roles.id())));
        assert!(svg.contains(&fresh.id().to_string()));
        // How each lane ended: the first segment at the wall, the second complete; the
        // task that ended without a known start faded; the running one blue to now.
        assert!(
            svg.contains("canceled, timed out or preempted, ran 1h 0m"),
            "{svg}"
        );
        assert!(svg.contains("complete, ran 20m"));
        assert!(svg.contains("complete, start not known"));
        assert!(svg.contains("error, start not known"));
        assert!(svg.contains("running (to now), ran 1h 20m"));
        assert!(svg.contains("waited 10m"));
    }
}
