//! moto's EC2 server for the tests: the local mode's own
//! (`orca_operator::local::moto`), but a server a test has finished with is
//! reset and handed to a later test of the same binary rather than killed.
//!
//! Most of moto's CPU in a test run went to starting it: Python's imports
//! and, at the first EC2 call, the EC2 backend's data take about 1.6 s of
//! CPU per server, and the warm-pool tests start one each; a reset and the
//! first call after it take under 0.1 s. The test run is bound by its two
//! cores, not by waiting (docs/architecture.md#what-a-test-run-costs).

use std::{
    ops::Deref,
    sync::Mutex,
    time::{Duration, Instant},
};

use orca_operator::local::moto::Moto as Server;

/// How long a server rests after its test before another test takes it.
/// The finished test's tasks (its pool loops) stop with its runtime, just
/// after its body returns; a request of theirs still under way has landed
/// well before the reset that readies the server for the next test.
const REST: Duration = Duration::from_secs(2);

/// Servers whose tests have ended, and since when.
static RESTING: Mutex<Vec<(Server, Instant)>> = Mutex::new(Vec::new());

/// A moto EC2 server a test has to itself, as new: nothing launched,
/// moto's default VPC and subnets only, IAM not enforced. A test that
/// passes gives it back when dropped; a test that panics kills it.
pub struct Moto {
    server: Option<Server>,
}

impl Moto {
    /// A rested server, reset; or, none resting, a new one, once it answers.
    pub fn start() -> Moto {
        while let Some(server) = rested() {
            if reset(&server) {
                return Moto {
                    server: Some(server),
                };
            }
            // It does not answer: dropped, which kills it.
        }
        Moto {
            server: Some(Server::start()),
        }
    }

    /// Empties it, as [`Moto::start`] does a rested server: for a test
    /// that launches many instances in turns and wants each turn to find
    /// EC2 as new. moto's tag filters read every tag the region holds for
    /// each instance, so a listing's cost grows with the square of what
    /// the region has ever held (terminated instances stay listed).
    /// Subnets are made anew: list them again.
    pub fn reset(&self) {
        assert!(reset(self), "moto's server did not answer its reset");
    }
}

fn rested() -> Option<Server> {
    let mut resting = RESTING.lock().unwrap_or_else(|e| e.into_inner());
    let i = resting
        .iter()
        .position(|(_, since)| since.elapsed() >= REST)?;
    Some(resting.swap_remove(i).0)
}

/// Back to a new server's state: IAM not enforced (a test may have turned
/// it on) and every backend emptied (instances, subnets made, IAM users,
/// SSM parameters); the EC2 backend makes its default VPC again at the
/// next call.
fn reset(server: &Server) -> bool {
    matches!(
        server.post("/moto-api/reset-auth", &[], "inf"),
        Some((200, _))
    ) && matches!(server.post("/moto-api/reset", &[], ""), Some((200, _)))
}

impl Deref for Moto {
    type Target = Server;

    fn deref(&self) -> &Server {
        self.server
            .as_ref()
            .expect("invariant: a Moto holds its server until it is dropped")
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        if std::thread::panicking() {
            return;
        }
        RESTING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((server, Instant::now()));
    }
}
