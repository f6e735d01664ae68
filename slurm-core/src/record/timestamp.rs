//! A record's times read back fast: the form a record is written in (RFC 3339 in UTC,
//! `2024-05-01T10:00:00.123456789Z`, as chrono writes a `DateTime<Utc>`) is read field by
//! field; any other text goes to chrono's own parser, so what reads and what it reads as
//! are chrono's. chrono's general parser costs about a quarter of reading a record.

use std::fmt;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveTime, Utc};
use serde::de::{self, Deserializer};

/// Read a time as chrono's `Deserialize` for `DateTime<Utc>` does (for
/// `#[serde(deserialize_with)]`).
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<DateTime<Utc>, D::Error> {
    deserializer.deserialize_str(TimeVisitor)
}

/// The visitor of [`deserialize`].
struct TimeVisitor;

impl de::Visitor<'_> for TimeVisitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        // chrono's words, so a wrong value is reported as before.
        formatter.write_str("an RFC 3339 formatted date and time string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<DateTime<Utc>, E> {
        match written_form(text) {
            Some(at) => Ok(at),
            None => text
                .parse::<DateTime<FixedOffset>>()
                .map(|at| at.with_timezone(&Utc))
                .map_err(E::custom),
        }
    }
}

/// `text` read as `YYYY-MM-DDTHH:MM:SS`, an optional fraction of 1 to 9 digits, and `Z`;
/// `None` when it is not in that form or names no time (a 30th of February, a leap
/// second), left to chrono.
fn written_form(text: &str) -> Option<DateTime<Utc>> {
    let bytes = text.as_bytes();
    let (&last, body) = bytes.split_last()?;
    if last != b'Z' || body.len() < 19 {
        return None;
    }
    let (fixed, fraction) = body.split_at(19);
    for (at, separator) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')] {
        if fixed[at] != separator {
            return None;
        }
    }
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let nanos = match fraction {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            number(digits)? * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(&fixed[0..4])?).ok()?,
        number(&fixed[5..7])?,
        number(&fixed[8..10])?,
    )?;
    let time = NaiveTime::from_hms_nano_opt(
        number(&fixed[11..13])?,
        number(&fixed[14..16])?,
        number(&fixed[17..19])?,
        nanos,
    )?;
    Some(date.and_time(time).and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{SecondsFormat, TimeZone};
    use serde::Deserialize;

    /// What chrono's own `Deserialize` reads `text` as (its error's text when it fails).
    fn by_chrono(text: &str) -> Result<DateTime<Utc>, String> {
        DateTime::<Utc>::deserialize(serde_json::Value::from(text)).map_err(|e| e.to_string())
    }

    fn by_us(text: &str) -> Result<DateTime<Utc>, String> {
        deserialize(serde_json::Value::from(text)).map_err(|e| e.to_string())
    }

    #[test]
    fn every_time_reads_as_chrono_reads_it() {
        let mut texts: Vec<String> = [
            "2024-05-01T10:00:00Z",
            "2024-05-01T10:00:00.5Z",
            "2024-05-01T10:00:00.000000001Z",
            "2024-05-01T10:00:00.999999999Z",
            "2024-02-29T23:59:59.123Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            // Left to chrono: other forms it reads, and times that are none.
            "2024-05-01T10:00:00.1234567891Z",
            "2024-05-01T10:00:00+02:00",
            "2024-05-01T10:00:00.25-05:30",
            "2024-05-01t10:00:00z",
            "2024-05-01 10:00:00Z",
            "2016-12-31T23:59:60Z",
            "2016-12-31T23:59:60.5Z",
            "+12024-05-01T10:00:00Z",
            "2023-02-29T10:00:00Z",
            "2024-13-01T10:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T10:60:00Z",
            "2024-05-01T10:00:00.Z",
            "2024-05-01T10:00:00,5Z",
            "2024-05-01T1a:00:00Z",
            "2024-05-01T10:00:00",
            "2024-05-01",
            "Z",
            "",
            "é024-05-01T10:00:00Z",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        // Times as records write them, every length of fraction.
        let mut nanos = 1u32;
        for i in 0..2000i64 {
            nanos = nanos.wrapping_mul(2_654_435_761).wrapping_add(12_345) % 1_000_000_000;
            let at = Utc
                .timestamp_opt(i * 7_919_993 + 946_684_800, nanos)
                .unwrap();
            for format in [
                SecondsFormat::AutoSi,
                SecondsFormat::Secs,
                SecondsFormat::Millis,
                SecondsFormat::Micros,
                SecondsFormat::Nanos,
            ] {
                texts.push(at.to_rfc3339_opts(format, true));
            }
            texts.push(
                serde_json::to_value(at)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        for text in &texts {
            assert_eq!(by_us(text), by_chrono(text), "{text:?}");
        }
        assert!(written_form("2024-05-01T10:00:00.5Z").is_some());
        assert!(written_form("2024-05-01T10:00:00+00:00").is_none());
        let wrong = deserialize(serde_json::json!(5)).unwrap_err().to_string();
        let chrono_wrong = DateTime::<Utc>::deserialize(serde_json::json!(5))
            .unwrap_err()
            .to_string();
        assert_eq!(wrong, chrono_wrong);
    }
}
