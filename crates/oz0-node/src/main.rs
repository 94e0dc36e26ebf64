//! `oz0-node`: the OZ0 node binary.
//!
//! One binary holds the CLI, the hidden in-sandbox stage, and the diagnostic
//! probe, so that there is one file to pin, verify and ship. Only `main`
//! exits; every status is documented in [`exit::Exit`] and the README.

mod check;
mod cli;
mod edge;
mod exit;
mod node;
mod probe;
mod run;

fn main() {
    // The hidden roles of this binary (the in-sandbox stage, the bridges,
    // the guest agent) are started by the node itself; they must not parse
    // a command line a user could influence, and they must be quick.
    let hidden: Option<fn() -> i32> = match std::env::args_os().nth(1) {
        Some(a) if a == oz0_linux::plan::STAGE_ARG => Some(oz0_linux::stage::main),
        Some(a) if a == oz0_linux::stage::BRIDGE_ARG => Some(oz0_linux::stage::bridge_main),
        Some(a) if a == oz0_microvm::guest::GUEST_ARG => Some(oz0_microvm::guest::main),
        Some(a) if a == oz0_microvm::smolguest::EGRESS_ARG => {
            Some(oz0_microvm::smolguest::egress_main)
        }
        _ => None,
    };
    let code = match hidden {
        Some(role) => role(),
        None => cli::main(),
    };
    std::process::exit(code);
}
