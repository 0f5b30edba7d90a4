//! What every set of figures prints with: its rows (main prints the
//! table's header), and the durations and percentiles in them.

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
