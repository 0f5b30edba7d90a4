//! Waiting for something a test expects to happen: one helper, with a
//! failure that says what was awaited and what was seen last.

use std::{future::Future, time::Duration};

/// Polls `check` (every 100 ms) until it returns `Ok`, for at most
/// `within`; `Err(seen)` describes what it saw instead. Panics with `what`
/// and the last thing seen once the time is up.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!("waited {within:?} for {what}; last seen: {seen}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`eventually`] for a check that only says yes or no.
pub async fn eventually_true<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let check = || {
        let answer = check();
        async move {
            if answer.await {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        }
    };
    eventually(what, within, check).await
}
