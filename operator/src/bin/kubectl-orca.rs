//! `kubectl-orca`: the kubectl plugin (`kubectl orca …` once it is on
//! PATH); wires the command line to `orca_operator::plugin`, nothing else.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = orca_operator::plugin::Cli::parse();
    match orca_operator::plugin::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubectl orca: {e}");
            ExitCode::FAILURE
        }
    }
}
