//! Fixtures for the integration and end-to-end tests: a throwaway
//! PostgreSQL cluster ([`pg`]), moto's EC2 server ([`moto`]) and the
//! project's own binaries as child processes ([`bins`]).
//!
//! A fixture that cannot start fails the test with a message saying what is
//! missing; nothing here skips.

pub mod bins;
pub mod moto;
pub mod pg;
mod spawn;
