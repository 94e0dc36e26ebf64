//! `oz0-node`: the OZ0 node binary.
//!
//! One binary holds the CLI, the hidden in-sandbox stage, and the diagnostic
//! probe, so that there is one file to pin, verify and ship. Only `main`
//! exits; every status is documented in [`exit::Exit`] and the README.
//!
//! The process starts at this file's C `main`, not std's: std's start-up
//! (its stack-overflow handler reads `/proc/self/maps`) cost about 0.3 ms of
//! every start here, and a sandboxed run starts this binary twice (the
//! node, then the stage inside the sandbox). What of std's start-up matters
//! is done by `oz0_sys::start::standard_setup`: standard descriptors that
//! are closed are opened on `/dev/null`, and SIGPIPE is ignored (writes to a
//! closed pipe fail with `EPIPE` instead of killing the process; what the
//! node runs gets SIGPIPE back at its default, from std's `Command`). A stack
//! overflow ends the process with SIGSEGV, without std's message.

#![cfg_attr(not(test), no_main)]

mod check;
mod cli;
mod edge;
mod exit;
mod node;
mod probe;
mod run;

/// The process entry (see the module documentation). `no_mangle` is the
/// only thing `unsafe_code` is allowed for here: it names the C entry
/// point; the body is safe code.
#[cfg(not(test))]
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    oz0_sys::start::standard_setup();
    // A panic ends the process as std's would: its message, status 101.
    let code = std::panic::catch_unwind(run).unwrap_or(101);
    std::process::exit(code);
}

// In unit tests the harness is the entry; `run` stays compiled and checked.
#[cfg_attr(test, allow(dead_code))]
fn run() -> i32 {
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
    match hidden {
        Some(role) => role(),
        None => cli::main(),
    }
}
