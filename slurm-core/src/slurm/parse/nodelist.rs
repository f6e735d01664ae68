//! SLURM's host lists (`n[01-03,07]`, `gpu1,gpu2`, `rack[1-2]-n[1-2]`): expanded into
//! node names. A small total parser (the `hostlist` crate is unmaintained and pulls an
//! old nom); see the property tests.

use crate::names::short;
use crate::{Error, Result};

/// The most names one list may expand to (a guard against `n[0-999999999]`).
pub(crate) const MAX_NODES: usize = 65_536;

/// Expand a host list into node names, in order, duplicates kept once. An empty text
/// (or SLURM's `None assigned`, `(null)`) is no node.
pub(crate) fn expand_nodelist(text: &str) -> Result<Vec<String>> {
    let t = text.trim();
    if matches!(t, "" | "None assigned" | "(null)" | "None") {
        return Ok(Vec::new());
    }
    let bad = |why: &str| Error::parse("SLURM node list", format!("`{}`: {why}", short(t)));
    let mut names: Vec<String> = Vec::new();
    for item in split_top_level(t).map_err(&bad)? {
        if item.is_empty() {
            return Err(bad("an empty name between commas"));
        }
        for name in expand_item(item).map_err(&bad)? {
            if !names.contains(&name) {
                if names.len() == MAX_NODES {
                    return Err(bad("expands to too many nodes"));
                }
                names.push(name);
            }
        }
    }
    Ok(names)
}

/// Split on the commas outside brackets.
fn split_top_level(text: &str) -> std::result::Result<Vec<&str>, &'static str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err("nested brackets"),
            ']' if depth == 1 => depth = 0,
            ']' => return Err("a `]` without its `[`"),
            ',' if depth == 0 => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            c if c.is_whitespace() || c.is_control() => return Err("a space inside a name"),
            _ => {}
        }
    }
    if depth != 0 {
        return Err("an unclosed `[`");
    }
    items.push(text[start..].trim());
    Ok(items)
}

/// One name with zero or more bracket groups, each a comma list of numbers or ranges.
fn expand_item(item: &str) -> std::result::Result<Vec<String>, &'static str> {
    let mut names = vec![String::new()];
    let mut rest = item;
    while !rest.is_empty() {
        let (literal, after) = match rest.find('[') {
            Some(open) => (&rest[..open], Some(&rest[open + 1..])),
            None => (rest, None),
        };
        for name in &mut names {
            name.push_str(literal);
        }
        let Some(after) = after else { break };
        let close = after.find(']').ok_or("an unclosed `[`")?;
        let numbers = expand_ranges(&after[..close])?;
        if names.len().saturating_mul(numbers.len()) > MAX_NODES {
            return Err("expands to too many nodes");
        }
        names = names
            .iter()
            .flat_map(|name| numbers.iter().map(move |n| format!("{name}{n}")))
            .collect();
        rest = &after[close + 1..];
    }
    if names.iter().any(String::is_empty) {
        return Err("an empty name");
    }
    Ok(names)
}

/// `01-03,07` -> `01 02 03 07`: a range keeps the zero padding of its first number.
fn expand_ranges(text: &str) -> std::result::Result<Vec<String>, &'static str> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(low) || !digits(high) {
            return Err("a bracket holds something other than numbers and ranges");
        }
        let (a, b): (u32, u32) = (
            low.parse().map_err(|_| "a bad number")?,
            high.parse().map_err(|_| "a bad number")?,
        );
        if b < a {
            return Err("a range that runs backwards");
        }
        if (b - a) as usize >= MAX_NODES || out.len() + (b - a) as usize >= MAX_NODES {
            return Err("expands to too many nodes");
        }
        let width = low.len();
        for n in a..=b {
            out.push(format!("{n:0width$}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(text: &str) -> Vec<String> {
        expand_nodelist(text).unwrap()
    }

    #[test]
    fn the_forms_slurm_prints() {
        assert_eq!(names("n[01-03,07]"), ["n01", "n02", "n03", "n07"]);
        assert_eq!(names("n1"), ["n1"]);
        assert_eq!(names("n1,n2"), ["n1", "n2"]);
        assert_eq!(names("n[1-2],gpu7"), ["n1", "n2", "gpu7"]);
        assert_eq!(
            names("rack[1-2]-n[1-2]"),
            ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
        );
        assert_eq!(names("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(names("n[1,1,2],n2"), ["n1", "n2"], "duplicates once");
        for empty in ["", "None assigned", "(null)", "  "] {
            assert!(names(empty).is_empty(), "{empty:?}");
        }
    }

    #[test]
    fn malformed_lists_are_parse_errors() {
        for bad in [
            "n[1-",
            "n[1-3",
            "n]1",
            "n[a-b]",
            "n[3-1]",
            "n[[1]]",
            "n1,,n2",
            "n[]",
            "[1-2]x,",
            "n 1",
            "n[0-99999999]",
        ] {
            let error = expand_nodelist(bad).unwrap_err();
            assert_eq!(error.kind(), crate::ErrorKind::Parse, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,40}") {
            let _ = expand_nodelist(&text);
        }

        #[test]
        fn a_bracketed_list_expands_to_its_numbers(
            prefix in "[a-z]{1,5}",
            numbers in proptest::collection::btree_set(0u32..500, 1..20),
            width in 1usize..4,
        ) {
            let parts: Vec<String> = numbers.iter().map(|n| format!("{n:0width$}")).collect();
            let text = format!("{prefix}[{}]", parts.join(","));
            let expected: Vec<String> = parts.iter().map(|p| format!("{prefix}{p}")).collect();
            prop_assert_eq!(expand_nodelist(&text).unwrap(), expected.clone());
            // The same names written out, comma separated, read the same.
            prop_assert_eq!(expand_nodelist(&expected.join(",")).unwrap(), expected);
        }

        #[test]
        fn a_range_is_every_number_between(prefix in "[a-z]{1,3}", low in 0u32..200, len in 0u32..50) {
            let text = format!("{prefix}[{low}-{}]", low + len);
            let got = expand_nodelist(&text).unwrap();
            prop_assert_eq!(got.len() as u32, len + 1);
            prop_assert_eq!(got.first().cloned(), Some(format!("{prefix}{low}")));
        }
    }
}
