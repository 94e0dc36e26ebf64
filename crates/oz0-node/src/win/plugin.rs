//! `oz0-node.exe plugin call`: one `tools/call` of a plugin's command tool
//! on this Windows node, at tier 0 (`crate::tool::windows`).
//!
//! A Windows node's plugin servers run as on tier 0, with the caller's
//! permissions and no wall, so the call is refused unless the caller says
//! so with `--no-wall`, and says it again on stderr when it runs. The edge
//! routes no tool job here.

use std::os::windows::io::AsHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, Subcommand};
use oz0_windows::supervise::CANCELLED_CODE;

use super::DataDirArg;

/// `oz0-node.exe plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCmd {
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
        PluginCmd::Call(a) => call(a),
    }
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
