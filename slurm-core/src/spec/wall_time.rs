//! `WallTime`: Slurm's time limits (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A wall time in whole seconds, parsed from and printed in Slurm's forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WallTime(u64);

impl WallTime {
    /// A wall time of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        WallTime(secs)
    }

    /// A wall time of `minutes` minutes.
    pub const fn from_minutes(minutes: u64) -> Self {
        WallTime(minutes * 60)
    }

    /// A wall time of `hours` hours.
    pub const fn from_hours(hours: u64) -> Self {
        WallTime(hours * 3600)
    }

    /// Parse `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` or `D-HH:MM:SS`
    /// (`UNLIMITED` is refused: jobs need a limit).
    ///
    /// ```
    /// use slurm_core::WallTime;
    /// assert_eq!(WallTime::parse("1-02:30").unwrap().to_slurm(), "1-02:30:00");
    /// assert_eq!(WallTime::parse("90").unwrap().minutes(), 90);
    /// ```
    pub fn parse(text: &str) -> Result<Self> {
        let t = text.trim();
        let bad = || {
            Error::invalid(
                "time",
                format!(
                    "`{}` is not a Slurm time; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 04:00:00)",
                    crate::names::short(t)
                ),
            )
        };
        let num = |s: &str| -> Result<u64> {
            if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        let (days, rest) = match t.split_once('-') {
            Some((d, rest)) => (Some(num(d)?), rest),
            None => (None, t),
        };
        let parts: Vec<u64> = rest.split(':').map(num).collect::<Result<_>>()?;
        let secs = match (days, parts.as_slice()) {
            (None, [m]) => m * 60,
            (None, [m, s]) => m * 60 + s,
            (None, [h, m, s]) => h * 3600 + m * 60 + s,
            (Some(d), [h]) => d * 86400 + h * 3600,
            (Some(d), [h, m]) => d * 86400 + h * 3600 + m * 60,
            (Some(d), [h, m, s]) => d * 86400 + h * 3600 + m * 60 + s,
            _ => return Err(bad()),
        };
        Ok(WallTime(secs))
    }

    /// The seconds.
    pub fn as_secs(self) -> u64 {
        self.0
    }

    /// The minutes, rounded up (as Slurm rounds a limit).
    pub fn minutes(self) -> u64 {
        self.0.div_ceil(60)
    }

    /// Slurm's `D-HH:MM:SS` (days only when non-zero): `04:00:00`, `1-00:00:00`.
    pub fn to_slurm(self) -> String {
        let (d, rem) = (self.0 / 86400, self.0 % 86400);
        let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
        if d > 0 {
            format!("{d}-{h:02}:{m:02}:{s:02}")
        } else {
            format!("{h:02}:{m:02}:{s:02}")
        }
    }
}

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_slurm())
    }
}

impl Serialize for WallTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_slurm())
    }
}

impl<'de> Deserialize<'de> for WallTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = WallTime;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Slurm time such as \"04:00:00\", or whole minutes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<WallTime, E> {
                WallTime::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<WallTime, E> {
                v.checked_mul(60)
                    .map(WallTime)
                    .ok_or_else(|| E::custom("time too large"))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<WallTime, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom("time cannot be negative"))
                    .and_then(|m| self.visit_u64(m))
            }
        }
        d.deserialize_any(V)
    }
}
