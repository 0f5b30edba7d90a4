//! The hashes that name what a user wrote and must mean the same across
//! releases: a Scheduler's revision (its pods' names and label
//! `orca.dev/revision`) and a WarmPool's launch hash (its instances' tag
//! `orca.dev/launch`). A value that changed with a release would roll every
//! Scheduler, or replace every instance, on upgrade.
//!
//! The scheme, version 1: the SHA-256 of the JSON of an object of named
//! fields, keys sorted, cut to a number of hex digits. Its fields' values
//! are normalised first: below the top level, a key whose value is null,
//! an empty list or an empty object is left out. Every field of the
//! operator's own types already skips itself when unset, and Kubernetes'
//! types do so too, so this changes no value a release has made; it keeps
//! a field added later with such a default from changing any. A field
//! whose default is `false` or `0` must skip itself when unset
//! (`skip_serializing_if`) to do the same: the golden tests
//! (`spec_hash_tests.rs`) pin the values of a corpus of specs and fail
//! otherwise.
//!
//! **A value says its scheme** ([`scheme_of`]): lowercase hex digits alone
//! are scheme 1, the first, whose values were made before schemes had
//! numbers and must keep their form (a new form would roll every
//! Scheduler and replace every instance on upgrade); a later scheme `N`
//! writes `<hex>-s<N>`, a form every name and label these values go into
//! takes. A value is compared under the scheme that made it ([`same`]): a
//! later release's scheme keeps computing scheme 1 for the pods and
//! instances that carry its values, so that changing the scheme rolls
//! nothing; and a value of a scheme this build does not know (met after a
//! rollback) is not known to differ, so a rollback replaces nothing
//! either.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The scheme [`hex_of`] computes.
pub const SCHEME: u32 = 1;

/// Which scheme made `value` (see the module's text): 1 for hex digits
/// alone, `N` for `<hex>-s<N>` (N ≥ 2); `None` for what no scheme makes.
pub fn scheme_of(value: &str) -> Option<u32> {
    let is_hex = |h: &str| {
        !h.is_empty()
            && h.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    match value.rsplit_once("-s") {
        None => is_hex(value).then_some(1),
        Some((hex, n)) => {
            // Written as `N` is: no sign, no leading zero.
            let scheme = n
                .parse::<u32>()
                .ok()
                .filter(|v| *v > SCHEME && v.to_string() == n)?;
            is_hex(hex).then_some(scheme)
        }
    }
}

/// Whether `value`, as read from a pod or an instance, is the value this
/// build computes under scheme 1 (`ours`): `Some(true)` or `Some(false)`
/// for a value of scheme 1, `None` for one of a scheme this build does not
/// compute (a later release's): not known either way.
pub fn same(value: &str, ours: &str) -> Option<bool> {
    match scheme_of(value) {
        Some(SCHEME) => Some(value == ours),
        // Not a value of any scheme: not the one computed here.
        None => Some(false),
        Some(_) => None,
    }
}

/// The first `bytes` bytes, in hex, of the hash of `fields` (an object)
/// under scheme [`SCHEME`].
pub fn hex_of(fields: Value, bytes: usize) -> String {
    let fields = match fields {
        Value::Object(top) => Value::Object(
            top.into_iter()
                .map(|(k, v)| (k, normalised(v)))
                .collect::<Map<_, _>>(),
        ),
        other => normalised(other),
    };
    digest_hex(&fields.to_string(), bytes)
}

/// The first `bytes` bytes of the SHA-256 of `text`, in hex.
pub(crate) fn digest_hex(text: &str, bytes: usize) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest
        .iter()
        .take(bytes)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `v` with every key whose value is null, `[]` or `{}` left out, at every
/// depth.
fn normalised(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, normalised(v)))
                .filter(|(_, v)| !is_unset(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalised).collect()),
        other => other,
    }
}

fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
#[path = "spec_hash_tests.rs"]
mod tests;
