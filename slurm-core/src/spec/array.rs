//! Arrays and sweeps: a [`TaskSet`] of indices (`0-7,10`), the spec's [`ArraySpec`]
//! (a size or an index list, and a maximum in parallel) and [`Sweep`] (named parameter
//! values, one point per task, given to each task in its environment).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::names::{short, validate_shell_name};
use crate::{Error, Result};

/// The most tasks one array may have (a guard; the cluster's own MaxArraySize applies too).
pub(crate) const MAX_TASKS: usize = 10_000;

/// A set of task indices, written as ranges: `0-7`, `0-3,8,10-12`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TaskSet(BTreeSet<u32>);

impl TaskSet {
    /// Indices `0..size`.
    pub fn first(size: u32) -> Self {
        TaskSet((0..size).collect())
    }

    /// Parse `0-7`, `3`, `0-3,8,10-12` (naming `field` in errors).
    ///
    /// ```
    /// use slurm_core::TaskSet;
    /// let set = TaskSet::parse("tasks", "8,0-3").unwrap();
    /// assert_eq!(set.to_string(), "0-3,8");
    /// assert_eq!(set.len(), 5);
    /// ```
    pub fn parse(field: &str, text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(
                field,
                format!(
                    "`{}` {why}; write task indices as ranges, e.g. 0-7 or 0-3,8",
                    short(text.trim())
                ),
            )
        };
        let mut set = BTreeSet::new();
        for part in text.trim().split(',') {
            let part = part.trim();
            let (low, high) = part.split_once('-').unwrap_or((part, part));
            let number = |s: &str| -> Result<u32> {
                if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("is not a list of numbers and ranges"));
                }
                s.parse().map_err(|_| bad("holds a number too large"))
            };
            let (low, high) = (number(low)?, number(high)?);
            if high < low {
                return Err(bad("holds a range that runs backwards"));
            }
            if (high - low) as usize >= MAX_TASKS
                || set.len() + ((high - low) as usize) >= MAX_TASKS
            {
                return Err(bad(&format!("holds more than {MAX_TASKS} tasks")));
            }
            set.extend(low..=high);
        }
        Ok(TaskSet(set))
    }

    /// The indices in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `index` is in the set.
    pub fn contains(&self, index: u32) -> bool {
        self.0.contains(&index)
    }

    /// The largest index.
    pub fn max(&self) -> Option<u32> {
        self.0.last().copied()
    }
}

impl FromIterator<u32> for TaskSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        TaskSet(iter.into_iter().collect())
    }
}

impl fmt::Display for TaskSet {
    /// Ranges, shortest form: `0-3,8,10-12`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            parts.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
        }
        f.write_str(&parts.join(","))
    }
}

impl Serialize for TaskSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TaskSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = Scalar::deserialize(d)?.0;
        TaskSet::parse("array.indices", &text).map_err(serde::de::Error::custom)
    }
}

/// An array job: a size (indices `0..size`) or an index list, and a maximum in parallel.
///
/// ```yaml
/// array: {size: 8, max_parallel: 2}      # tasks 0-7, two at a time
/// array: {indices: "0-3,8"}              # tasks 0, 1, 2, 3 and 8
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArraySpec {
    /// How many tasks (indices `0..size`); or give `indices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// The task indices (`0-3,8`); or give `size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indices: Option<TaskSet>,
    /// At most this many tasks run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
}

/// A value of a sweep parameter: YAML/JSON strings, numbers and booleans, kept as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Named parameter values for a sweep: each task gets one point, as environment
/// variables (staged once as a file, never in argv).
///
/// ```yaml
/// sweep: {LR: [0.1, 0.01], BATCH: [32, 64]}             # a grid: 4 tasks
/// sweep: [{LR: 0.1, BATCH: 32}, {LR: 0.01, BATCH: 64}]   # the points: 2 tasks
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Sweep {
    /// Every combination of the values; names in alphabetical order, the last one
    /// varying fastest (`{BATCH: [32, 64], LR: [a, b]}`: 32/a, 32/b, 64/a, 64/b).
    Grid(BTreeMap<String, Vec<Scalar>>),
    /// The points themselves, in order.
    Points(Vec<BTreeMap<String, Scalar>>),
}

impl Sweep {
    /// The points in task order (task `i` gets `points()[i]`).
    pub fn points(&self) -> Vec<BTreeMap<String, String>> {
        match self {
            Sweep::Points(points) => points
                .iter()
                .map(|p| p.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
                .collect(),
            Sweep::Grid(grid) => {
                let mut points = vec![BTreeMap::new()];
                for (name, values) in grid {
                    points = points
                        .into_iter()
                        .flat_map(|point: BTreeMap<String, String>| {
                            values.iter().map(move |v| {
                                let mut next = point.clone();
                                next.insert(name.clone(), v.0.clone());
                                next
                            })
                        })
                        .collect();
                }
                points
            }
        }
    }

    /// The parameter names.
    pub fn names(&self) -> BTreeSet<String> {
        match self {
            Sweep::Grid(grid) => grid.keys().cloned().collect(),
            Sweep::Points(points) => points.iter().flat_map(|p| p.keys().cloned()).collect(),
        }
    }

    /// Names are shell variable names, values one line each, at least one point.
    pub(crate) fn validate(&self) -> Result<()> {
        let count = match self {
            Sweep::Grid(grid) => {
                if grid.is_empty() {
                    return Err(Error::invalid(
                        "sweep",
                        "is empty; name at least one parameter and its values",
                    ));
                }
                let mut count: usize = 1;
                for (name, values) in grid {
                    if values.is_empty() {
                        return Err(Error::invalid(
                            "sweep",
                            format!("{name} has no values; give at least one"),
                        ));
                    }
                    count = count.saturating_mul(values.len());
                }
                count
            }
            Sweep::Points(points) => points.len(),
        };
        if count == 0 {
            return Err(Error::invalid("sweep", "has no points; give at least one"));
        }
        if count > MAX_TASKS {
            return Err(Error::invalid(
                "sweep",
                format!("makes {count} tasks, more than {MAX_TASKS}; sweep fewer values"),
            ));
        }
        for name in self.names() {
            validate_shell_name("sweep", &name)?;
        }
        for point in self.points() {
            for (name, value) in point {
                if value.contains('\0') || value.contains('\n') {
                    return Err(Error::invalid(
                        "sweep",
                        format!("a value of {name} holds a NUL or newline; give one-line values"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What an array spec and a sweep resolve to: the task indices and the maximum in parallel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ArrayPlan {
    /// The task indices.
    pub indices: TaskSet,
    /// At most this many at once.
    pub max_parallel: Option<u32>,
}
