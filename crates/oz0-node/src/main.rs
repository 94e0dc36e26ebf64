//! `oz0-node`: the OZ0 node binary.
//!
//! One binary holds the CLI, the hidden in-sandbox stage, and the diagnostic
//! probe, so that there is one file to pin, verify and ship. Only `main`
//! exits; every status is documented in [`oz0_core::exit::Exit`] and the
//! README.
//!
//! The process starts at this file's C `main`, not std's: std's start-up
//! (its stack-overflow handler reads `/proc/self/maps`) cost about 0.3 ms of
//! every start here, and a sandboxed run starts this binary twice (the
//! node, then the stage inside the sandbox). What of std's start-up matters
//! is done by `oz0_sys::start::standard_setup`: standard descriptors that
//! are closed are opened on `/dev/null`, and SIGPIPE is ignored (writes to a
//! closed pipe fail with `EPIPE` instead of killing the process; what the
//! node runs gets SIGPIPE back at its default, from std's `Command`). A stack
//! overflow ends the process with SIGSEGV, without std's message. The
//! command line is the one `main` was given (`oz0_sys::start::keep_args`):
//! on musl, std fills its own copy only in its own start-up.
//!
//! On Linux the shipped binary is linked statically against musl
//! (`scripts/build-node`): glibc's start-up asks the CPU about its caches
//! and features with `cpuid`, which traps to the hypervisor in a virtual
//! machine, about 0.4 ms of every start on the machines we measure.
//!
//! Every platform parses one command tree (`cli.rs`), whose commands that
//! only one platform has are gated by `cfg`. On Windows the binary is
//! `oz0-node.exe`, its handlers in `src/win/`, and on macOS in `src/mac/`
//! (std's own start-up; none of the Linux roles above exist there).

#![cfg_attr(all(not(test), target_os = "linux"), no_main)]

/// On musl (the shipped Linux binary), dlmalloc instead of musl's allocator
/// (see the dependency's note in Cargo.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(target_os = "linux")]
mod check;
mod cli;
#[cfg(not(target_os = "linux"))]
mod daemon;
mod edge;
mod facts_file;
mod flags;
#[cfg(target_os = "linux")]
mod key;
mod log;
#[cfg(target_os = "macos")]
mod mac;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod mem;
#[cfg(target_os = "linux")]
mod node;
#[cfg(target_os = "linux")]
mod oci;
#[cfg(target_os = "linux")]
mod out;
mod outcome;
mod platform;
#[cfg(target_os = "linux")]
mod plugin;
#[cfg(unix)]
mod private;
mod record;
#[cfg(target_os = "linux")]
mod run;
#[cfg(target_os = "linux")]
mod setup;
#[cfg(unix)]
mod signals;
mod tool;
#[cfg(target_os = "linux")]
mod vm;
#[cfg(windows)]
mod win;
mod witness;

/// The Windows and macOS nodes' entry: std's `main`, with the command line
/// as the system passed it.
#[cfg(not(target_os = "linux"))]
fn main() {
    std::process::exit(cli::main(std::env::args_os().collect()));
}

/// The process entry (see the module documentation). `unsafe_code` is
/// allowed here for `no_mangle`, which names the C entry point, and for
/// keeping the command line the C library passed to it.
#[cfg(all(not(test), target_os = "linux"))]
#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: these are the C library's own argc and argv for `main`.
    unsafe { oz0_sys::start::keep_args(argc, argv) };
    oz0_sys::start::standard_setup();
    // A panic ends the process as std's would: its message, status 101.
    let code = std::panic::catch_unwind(run).unwrap_or(101);
    std::process::exit(code);
}

// In unit tests the harness is the entry; `run` stays compiled and checked.
#[cfg(target_os = "linux")]
#[cfg_attr(test, allow(dead_code))]
fn run() -> i32 {
    // The hidden roles of this binary (the in-sandbox stage, the bridges,
    // the guest agent) are started by the node itself; they must not parse
    // a command line a user could influence, and they must be quick.
    let args = oz0_sys::start::args_os();
    match args.get(1) {
        Some(a) if a == oz0_linux::plan::STAGE_ARG => oz0_linux::stage::main(),
        Some(a) if a == oz0_microvm::guest::GUEST_ARG => oz0_microvm::guest::main(),
        Some(a) if a == oz0_microvm::smolguest::EGRESS_ARG => {
            oz0_microvm::smolguest::egress_main(args[2..].to_vec())
        }
        _ => cli::main(args),
    }
}
