//! Fixtures for the integration and end-to-end tests: a throwaway
//! PostgreSQL cluster ([`pg`]), moto's EC2 server ([`moto`]) and the
//! project's own binaries as child processes ([`bins`]); a stand-in for an
//! instance's metadata service ([`imds`]); the IAM policy linter
//! ([`parliament`]); and the reference scheduler `orca-sim` ([`sim`]).
//!
//! A fixture that cannot start fails the test with a message saying what is
//! missing; nothing here skips.

pub mod bins;
pub mod booting;
pub mod cluster;
pub mod counting;
pub mod ec2_faults;
pub mod eventually;
pub mod forecast_sim;
pub mod hostile;
pub mod iam;
pub mod image;
pub mod imds;
pub mod local;
pub mod mock_api;
pub mod moto;
pub mod node;
pub mod observability;
pub mod on_cluster;
pub mod parliament;
pub mod pg;
pub mod release;
pub mod release_state;
pub mod sim;
pub mod warm;
