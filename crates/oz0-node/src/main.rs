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
    // The stage is started by bubblewrap inside a run; it must not parse a
    // command line a user could influence, and it must be quick.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(oz0_linux::plan::STAGE_ARG))
    {
        std::process::exit(oz0_linux::stage::main());
    }
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(oz0_linux::stage::BRIDGE_ARG))
    {
        std::process::exit(oz0_linux::stage::bridge_main());
    }
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(oz0_microvm::guest::GUEST_ARG))
    {
        std::process::exit(oz0_microvm::guest::main());
    }
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(oz0_microvm::smolguest::EGRESS_ARG))
    {
        std::process::exit(oz0_microvm::smolguest::egress_main());
    }
    let code = cli::main();
    std::process::exit(code);
}
