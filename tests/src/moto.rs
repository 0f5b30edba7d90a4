//! moto's EC2 server (the local mode's own, see `orca_operator::local::moto`).

pub use orca_operator::local::moto::Moto;
