//! `bench NAME`: one set of the project's benchmark figures
//! (docs/architecture.md#benchmarks), printed as `| figure | value |
//! target |` rows; `bench --list` names the sets. scripts/bench runs each
//! set in a process of its own, so that no set's databases, servers or
//! memory are another's. One binary rather than one a set: they share the
//! operator, kube and the AWS SDK, which each binary compiled and linked
//! again at every build of the tests.

mod agent;
mod coldstart;
mod figures;
mod forecast;
mod handover;
mod objective;
mod pool;
mod scheduler;
mod tenants;
mod warmpool;

use std::process::ExitCode;

/// The sets, in the order scripts/bench prints them.
const SETS: [&str; 9] = [
    "agent",
    "coldstart",
    "forecast",
    "handover",
    "objective",
    "pool",
    "scheduler",
    "tenants",
    "warmpool",
];

/// A set that panics on failure, as one that returns its error.
fn done(set: impl FnOnce() + 'static) -> Box<dyn FnOnce() -> anyhow::Result<()>> {
    Box::new(move || {
        set();
        Ok(())
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let set: Box<dyn FnOnce() -> anyhow::Result<()>> = match args[..] {
        ["--list"] => {
            println!("{}", SETS.join("\n"));
            return ExitCode::SUCCESS;
        }
        ["agent"] => Box::new(agent::run),
        ["coldstart"] => done(coldstart::run),
        ["forecast"] => done(forecast::run),
        ["handover"] => Box::new(handover::run),
        ["objective"] => done(objective::run),
        ["pool"] => done(|| pool::run(false)),
        // The class-wide passes' figure alone.
        ["pool", "classes"] => done(|| pool::run(true)),
        ["scheduler"] => done(scheduler::run),
        ["tenants"] => done(tenants::run),
        ["warmpool"] => done(warmpool::run),
        _ => {
            eprintln!(
                "bench: expected one of {} (or --list; `pool classes` for that figure alone), got {:?}",
                SETS.join(", "),
                args.join(" ")
            );
            return ExitCode::from(2);
        }
    };
    println!("| figure | value | target |");
    println!("| --- | --- | --- |");
    match set() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench {}: {e:#}", args.join(" "));
            ExitCode::FAILURE
        }
    }
}
