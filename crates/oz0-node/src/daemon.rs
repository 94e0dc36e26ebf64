//! What the Windows and macOS nodes' `run` and `facts` share besides the
//! daemon itself: the flags, the event loop around the one daemon of every
//! platform (`crate::edge`, whose job loop, records and reports Linux
//! uses too), and the facts file.
//!
//! A tier-0 job runs with the node's own permissions: no wall. So, as on
//! Linux with `--sandbox none`, a job that asks for what only a wall
//! enforces (egress, memory, processes, CPU time) is refused, and a tool
//! job (whose server runs only behind a wall) too. What it gets:
//!
//! - a fresh work folder `<work-root>/job-<id>-<attempt>`, its current
//!   folder, removed after the job;
//! - exactly the job's variables, plus what the platform's programs need
//!   (a system `PATH` when the job names none); never the node's own;
//! - its output in `<data-dir>/jobs/<id>/stdout` and `stderr`, sent to the
//!   edge as it comes, and the last 64 KiB of each with its end;
//! - every process it starts ends when its first one ends, its timeout
//!   passes, its lease is lost or the node stops: the platform's tier-0
//!   sandbox holds them together (a job object on Windows, the run's mark
//!   on macOS), and the job runs through it as every run does, through
//!   the node core's door (`oz0_core::Sandbox::run`, its output files as
//!   the command's stdio, a cancel that fires when the job is dropped).

use std::fs;
use std::path::Path;

use oz0_core::exit::Exit;
use oz0_edge::client::NodeKey;
use oz0_policy::facts::NodeFacts;

use crate::flags::DataDirArg;

pub use crate::log::log;

/// Logs `msg` and gives `code`'s status.
pub fn fail(msg: impl std::fmt::Display, code: Exit) -> i32 {
    log(&msg.to_string());
    code.code()
}

/// `facts` flags.
#[derive(Debug, clap::Args)]
pub struct FactsArgs {
    #[command(flatten)]
    pub data: DataDirArg,
}

/// `facts`: prints what `run` wrote in the data directory.
pub fn facts(a: FactsArgs) -> i32 {
    match a.data.resolve() {
        Ok(d) => print_facts(&d),
        Err(e) => fail(e, Exit::Usage),
    }
}

/// Prints the facts `run` wrote in `data_dir`.
fn print_facts(data_dir: &Path) -> i32 {
    let path = data_dir.join("facts.json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            return fail(
                format!(
                "cannot read {}: {e}: start the node once (`oz0-node run --once`) to write them",
                path.display()
            ),
                Exit::CheckFailed,
            )
        }
    };
    match serde_json::from_str::<NodeFacts>(&text) {
        Ok(f) => {
            println!("{}", serde_json::to_string_pretty(&f).expect("serialises"));
            Exit::Ok.code()
        }
        Err(e) => fail(
            format!(
                "{} is not a facts document of this version: {e}",
                path.display()
            ),
            Exit::CheckFailed,
        ),
    }
}

/// Runs the daemon until Ctrl-C (or SIGTERM on macOS): with an edge, the
/// one daemon of every platform (`crate::edge::serve`) behind `walls`;
/// without one, stays up (or, with `once`, returns).
pub fn event_loop(
    edge: Option<crate::edge::Settings>,
    walls: crate::edge::Walls,
    key: NodeKey,
    facts: NodeFacts,
    once: bool,
) -> i32 {
    if let Some(s) = edge {
        return crate::edge::serve(
            s,
            walls,
            key,
            facts,
            || None,
            Box::pin(async {
                stopped().await;
                Ok(())
            }),
            once,
        );
    }
    if once {
        return Exit::Ok.code();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                format!("cannot start the event loop: {e}"),
                Exit::CheckFailed,
            )
        }
    };
    log("ready; Ctrl-C stops the node");
    rt.block_on(stopped());
    log("stopping");
    Exit::Ok.code()
}

/// Resolves when the node is told to stop: Ctrl-C, and on Unix SIGTERM
/// (a service's stop).
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
