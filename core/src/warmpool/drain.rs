//! Drain: instances a person asked to go (`kubectl orca drain`), named in
//! the WarmPool's annotation; the plan retires each once it is not in a
//! run (`Reason::Drained`).

use std::collections::HashSet;

/// The WarmPool annotation naming instances to drain, comma-separated
/// (`kubectl orca drain`).
pub const DRAIN: &str = "orca.dev/drain";

/// The instance ids of a [`DRAIN`] annotation's value: comma- or
/// space-separated, blanks ignored.
pub fn drain_of(value: &str) -> HashSet<String> {
    value
        .split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_whatever_the_separators() {
        let ids = drain_of(" i-a,i-b  i-c,, ");
        let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        ids.sort();
        assert_eq!(ids, ["i-a", "i-b", "i-c"]);
        assert!(drain_of("").is_empty());
    }
}
