//! `oz0-node.exe plugin call`: one `tools/call` of a plugin's command tool
//! on this Windows node, at tier 0 (`crate::tool::windows`); `plugin
//! check`: which tools it runs, and with `--no-wall` what each server
//! lists.
//!
//! A Windows node's plugin servers run as on tier 0, with the caller's
//! permissions and no wall, so the call is refused unless the caller says
//! so with `--no-wall`, and says it again on stderr when it runs. The edge
//! routes no tool job here.

use std::os::windows::io::AsHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, Subcommand};
use oz0_core::exit::Exit;
use oz0_core::Cancel;
use oz0_edge::term::escape;
use oz0_plugin::manifest::Tool;
use oz0_plugin::mcp::{shown, Listed};
use oz0_windows::supervise::CANCELLED_CODE;
use serde_json::json;

use super::DataDirArg;

/// `oz0-node.exe plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCmd {
    /// Which of a plugin's tools `plugin call` runs here, and why not.
    ///
    /// Reads DIR\oz0-plugin.yaml (a refused manifest is named with its line
    /// and the fix) and prints one line per tool. A Windows node runs a
    /// command tool's server at tier 0 (no wall, your own permissions) and
    /// refuses a tool with egress, a container tool and a microVM tool. With
    /// --no-wall it also starts each command tool's server as plugin call
    /// does (at tier 0, an empty work folder, its settings and secrets from
    /// this environment), which must answer initialize and tools/list within
    /// --server-timeout; the end of its stderr is shown when it does not.
    /// The edge sends no tool job to a Windows node: this is about your own
    /// calls here.
    ///
    /// Exit status: 0 when plugin call runs every tool here; 1 when it
    /// refuses one, a server does not answer, or the manifest is refused;
    /// 130 cancelled (Ctrl-C).
    Check(CheckArgs),
    /// Make one tools/call of one of a plugin's command tools, at tier 0.
    ///
    /// A Windows node runs a tool's server at tier 0: no wall, with your
    /// own permissions (it reads, writes and reaches what you can), so
    /// the call is refused without --no-wall. The server runs in a
    /// kill-on-close job object that ends it, and every process it started,
    /// with the call; it gets the tool's settings and secrets (read by name
    /// from this environment) and what Windows needs, nothing else of this
    /// environment. /work in its command and in the call's string
    /// arguments stands for the work folder. Files given with --file are
    /// placed under /work/.oz0-files/ and named in the call's
    /// _meta["oz0/files"]. Refused: a tool with egress (only a wall's
    /// egress proxy holds it to its hosts), a container or microVM tool:
    /// call those on a Linux node. Ctrl-C or Ctrl-Break cancel the call and
    /// end its server.
    ///
    /// Exit status: 0 the tool answered; 1 it answered with isError; 125 no
    /// result (refused, the server failed or the call timed out: the reason
    /// on stderr); 130 cancelled.
    ///
    /// Example:
    ///   oz0-node.exe plugin call C:\plugins\fs fs --no-wall --name list_directory
    ///       --arguments "{\"path\": \"/work\"}" --work C:\work\job1
    #[command(verbatim_doc_comment)]
    Call(CallCliArgs),
}

/// `plugin check` flags on Windows.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The installed plugin's folder (holding oz0-plugin.yaml).
    #[arg(value_name = "DIR")]
    pub dir: std::path::PathBuf,
    /// One JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Start each command tool's server, at tier 0: no wall, with your own
    /// permissions (without it, none is started).
    #[arg(long = "no-wall")]
    pub no_wall: bool,
    /// How long a server has to answer initialize and tools/list, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    pub server_timeout: u64,
    #[command(flatten)]
    pub data: DataDirArg,
}

/// `plugin call` flags on Windows.
#[derive(Debug, Args)]
pub struct CallCliArgs {
    #[command(flatten)]
    pub call: crate::flags::CallFlags,
    /// Run the tool's server with no wall, with your own permissions (a
    /// Windows node's tier 0): required, so that it is never a surprise.
    #[arg(long = "no-wall")]
    pub no_wall: bool,
    #[command(flatten)]
    pub data: DataDirArg,
}

/// Runs `plugin …`; returns the exit status.
pub fn main(cmd: PluginCmd) -> i32 {
    match cmd {
        PluginCmd::Check(a) => check(&a),
        PluginCmd::Call(a) => call(a),
    }
}

/// A tool's line: whether `plugin call` runs it here, and what its
/// server listed when started.
fn check(a: &CheckArgs) -> i32 {
    let (_, manifest) = match oz0_plugin::job::read_plugin_dir(&a.dir) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::CheckFailed.code();
        }
    };
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let cancel = oz0_windows::native::cancel_on_ctrl_c().ok();
    let cancelled = Arc::new(AtomicBool::new(false));
    let mut tools: Vec<(&Tool, Result<Option<Listed>, String>)> = Vec::new();
    for t in &manifest.tools {
        let r = match crate::tool::windows::refusal(t) {
            Some(e) => Err(e.to_string()),
            None if a.no_wall => try_server(a, &data_dir, t, cancel.as_ref(), &cancelled).map(Some),
            None => Ok(None),
        };
        // Ctrl-C ends the check: no server after it is started.
        if cancelled.load(Ordering::SeqCst) {
            eprintln!("oz0-node: the check was cancelled (Ctrl-C); its server's job was ended");
            return CANCELLED_CODE;
        }
        tools.push((t, r));
    }
    let all = tools.iter().all(|(_, r)| r.is_ok());
    if a.json {
        let doc = json!({
            "plugin": manifest.name,
            "version": manifest.version,
            "tier": 0,
            "wall": "none",
            "tools": tools.iter().map(|(t, r)| json!({
                "id": t.id,
                "runs_here": r.is_ok(),
                "reason": r.as_ref().err(),
                "server": r.as_ref().ok().and_then(Option::as_ref),
            })).collect::<Vec<_>>(),
        });
        println!("{}", oz0_edge::term::json(&doc).expect("serialises"));
    } else {
        println!(
            "Plugin {}: {} tool(s); tier 0 (no wall): plugin call --no-wall runs a command tool's server here with your own permissions; the edge sends no tool job to a Windows node",
            escape(manifest.name.as_deref().unwrap_or("(unnamed)").as_bytes()),
            tools.len()
        );
        for (t, r) in &tools {
            println!(
                "{}",
                match r {
                    Ok(Some(l)) => format!(
                        "{}: runs here at tier 0 (its server answered in {} ms and lists {})",
                        t.id,
                        l.initialize_ms,
                        escape(shown(&l.tools).as_bytes())
                    ),
                    Ok(None) => format!(
                        "{}: runs here at tier 0 (its server was not started: --no-wall starts it)",
                        t.id
                    ),
                    Err(why) => format!("{}: {}", t.id, escape(why.as_bytes())),
                }
            );
        }
    }
    if all {
        Exit::Ok.code()
    } else {
        Exit::CheckFailed.code()
    }
}

/// Starts `t`'s server at tier 0 in a work folder of its own and asks it
/// `initialize` and `tools/list`: what it lists, or why it did not answer,
/// with the end of what it wrote to stderr.
fn try_server(
    a: &CheckArgs,
    data_dir: &std::path::Path,
    t: &Tool,
    cancel: Option<&Cancel>,
    cancelled: &Arc<AtomicBool>,
) -> Result<Listed, String> {
    let (_work, work) = crate::tool::work_folder(None)?;
    let (_errs, errs) = crate::tool::work_folder(None)?;
    let file = |e: std::io::Error| format!("a file for the server's stderr: {e}");
    let errors = std::fs::File::create_new(errs.join("stderr")).map_err(file)?;
    let kept = std::fs::File::open(errs.join("stderr")).map_err(file)?;
    let cancel = cancel
        .map(|c| c.0.try_clone().map(Cancel))
        .transpose()
        .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
    let r = crate::tool::windows::try_server(
        crate::tool::windows::Ctx {
            work: &work,
            data_dir,
            errors,
            cancel,
            cancelled: cancelled.clone(),
        },
        t,
        std::time::Duration::from_secs(a.server_timeout),
    );
    r.map_err(|e| {
        crate::tool::with_stderr_end(format!("its server did not answer at tier 0: {e}"), kept)
    })
}

fn call(a: CallCliArgs) -> i32 {
    let fail = crate::tool::call_refused;
    let checked = match a.call.checked() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if let Some(e) = crate::tool::windows::refusal(&checked.tool) {
        return fail(e.to_string());
    }
    if !a.no_wall {
        return fail(format!(
            "this Windows node runs tool {:?}'s server at tier 0: no wall, with your own permissions (it would read, write and reach what you can): add --no-wall to run it so, or call it on a Linux node, whose tier 1 holds it",
            checked.tool.id
        ));
    }
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return fail(e.to_string()),
    };
    let (_own, work) = match crate::tool::work_folder(a.call.work.as_deref()) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let errors = match std::io::stderr().as_handle().try_clone_to_owned() {
        Ok(h) => std::fs::File::from(h),
        Err(e) => return fail(format!("stderr: {e}")),
    };
    eprintln!(
        "oz0-node: tier 0: no wall: tool {:?}'s server runs with your permissions, in {}",
        checked.tool.id,
        work.display()
    );
    let cancelled = Arc::new(AtomicBool::new(false));
    let end = crate::tool::windows::run(
        crate::tool::windows::Ctx {
            work: &work,
            data_dir: &data_dir,
            errors,
            cancel: oz0_windows::native::cancel_on_ctrl_c().ok(),
            cancelled: cancelled.clone(),
        },
        &checked,
    );
    let end = match end {
        Ok(e) => e,
        Err(e) => return fail(e.to_string()),
    };
    let stopped = cancelled.load(Ordering::SeqCst).then(|| {
        (
            "the call was cancelled (Ctrl-C); its server's job was ended".to_string(),
            CANCELLED_CODE,
        )
    });
    end.show(a.call.json, stopped)
}
