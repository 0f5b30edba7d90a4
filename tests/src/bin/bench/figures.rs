//! What the sets of figures share: their rows (main prints the table's
//! header), the durations and percentiles in them, and the runtime of the
//! sets that are not `#[tokio::main]` functions.

use std::time::Duration;

/// One row of the table.
pub fn row(figure: &str, value: String, target: &str) {
    println!("| {figure} | {value} | {target} |");
}

/// A duration in milliseconds, two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The `p` (0 to 1) percentile of `sorted`, the nearest rank.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

/// A multi-threaded runtime with every driver on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("invariant: a runtime can be built")
}
