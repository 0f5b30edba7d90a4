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
//! Values of scheme 1 carry no version mark, being the first. A later scheme
//! must mark its values (a character that is not a hex digit) and keep
//! computing scheme 1 for the pods and instances that carry its values, so
//! that changing the scheme rolls nothing.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The scheme [`hex_of`] computes.
pub const SCHEME: u32 = 1;

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
