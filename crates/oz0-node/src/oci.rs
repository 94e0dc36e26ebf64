//! `oz0-node oci pull`: an image by digest into the node's image cache
//! (`<data dir>/oci/`, `oz0_oci::cache`), checked and unpacked once; and
//! what `sandbox run --image` takes from it (the rootfs, and the command,
//! variables and working folder of the image's config).
//!
//! What the image's config says (entrypoint, command, environment, working
//! folder, user) is the image's text: it is printed escaped (JSON strings),
//! never as it came.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use clap::{Args, Subcommand};
use oz0_core::exit::Exit;
use oz0_core::ImageRoot;
use oz0_oci::cache::{Cache, Image};
use oz0_oci::manifest::RunConfig;
use oz0_oci::registry::{Client, Options};
use oz0_oci::Reference;
use oz0_policy::env::{NODE_PREFIX, PROXY_VARS, SANDBOX_SET};
use oz0_policy::EnvVar;
use serde_json::json;

use crate::flags::DataDirArg;
pub use crate::flags::OciArgs;

/// `oz0-node oci …`.
#[derive(Debug, Subcommand)]
pub enum OciCmd {
    /// Pull an image by digest into the node's image cache and unpack it.
    ///
    /// IMAGE is oci:REGISTRY/NAME@sha256:<64 hex digits>: a tag is refused
    /// (it can point at another image tomorrow; the message says how to
    /// find the digest). The registry must be one --oci-registry names.
    /// Every manifest and blob is checked against its digest as it streams,
    /// each layer against the digest its config names, and the layers are
    /// unpacked in order into <data-dir>/oci/images/<digest>/rootfs: no
    /// entry outside it, no device nodes, no setuid, setgid or sticky bits,
    /// no owners or extended attributes (every file is this user's), read-only.
    /// An image already in the cache is not fetched again. Prints the
    /// rootfs and what the image's config starts (entrypoint, cmd, env,
    /// working directory, user).
    ///
    /// Exit status: 0 the image is in the cache; 1 the pull was refused or
    /// failed (which blob, and why, on stderr); 2 the command line was
    /// wrong (a tag, a malformed reference).
    ///
    /// Example:
    ///   oz0-node oci pull --oci-registry ghcr.io \
    ///       oci:ghcr.io/acme/fetch-mcp@sha256:4f6c…
    #[command(verbatim_doc_comment)]
    Pull(PullArgs),
}

/// `oci pull` flags.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// The image: oci:REGISTRY/NAME@sha256:<64 hex digits>
    #[arg(value_name = "IMAGE")]
    pub image: String,
    #[command(flatten)]
    pub oci: OciArgs,
    /// One JSON document instead of lines
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub data: DataDirArg,
}

/// Runs `oci …`; returns the exit status.
pub fn main(c: OciCmd) -> i32 {
    match c {
        OciCmd::Pull(a) => pull(a),
    }
}

/// Why an image could not be had: the message, and whether the command
/// line was wrong (usage) or the pull failed.
pub struct FetchError {
    /// What went wrong, naming the blob or flag and the fix.
    pub msg: String,
    /// The command line was wrong (a tag, an unknown registry's flags).
    pub usage: bool,
}

impl FetchError {
    /// The exit status it gives.
    pub fn code(&self) -> i32 {
        if self.usage {
            Exit::Usage.code()
        } else {
            Exit::CheckFailed.code()
        }
    }
}

/// `image` (`oci:REGISTRY/NAME@sha256:…`) from the cache in `data_dir`,
/// pulled and unpacked first when it is not there. The image stays held
/// (never evicted) while the returned value lives.
pub fn fetch(image: &str, a: &OciArgs, data_dir: &Path) -> Result<(Reference, Image), FetchError> {
    let usage = |msg: String| FetchError { msg, usage: true };
    let failed = |msg: String| FetchError { msg, usage: false };
    let r = Reference::parse(image).map_err(|e| usage(e.to_string()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .map_err(|e| {
            failed(format!(
                "cannot make the data directory {}: {e}",
                data_dir.display()
            ))
        })?;
    let client = Client::new(&Options {
        allowed: a.registries.clone(),
        auth_file: a.auth.clone(),
        ca_file: a.ca.clone(),
    })
    .map_err(|e| usage(e.to_string()))?;
    let max = a.cache_mib.saturating_mul(1 << 20);
    let image = Cache::open(data_dir, max)
        .and_then(|c| c.pull(&client, &r))
        .map_err(|e| failed(format!("{r}: {e}")))?;
    Ok((r, image))
}

fn pull(a: PullArgs) -> i32 {
    let data_dir = match oz0_linux::host::data_dir(a.data.data_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    match fetch(&a.image, &a.oci, &data_dir) {
        Ok((r, i)) => {
            show(&r, &i, a.json);
            Exit::Ok.code()
        }
        Err(e) => {
            eprintln!("oz0-node: oci pull {}", e.msg);
            e.code()
        }
    }
}

/// The command a run of the image starts: its entrypoint, then `given`
/// (the caller's arguments) or, when none are given, its cmd.
pub(crate) fn command(c: &RunConfig, given: Vec<String>) -> Result<Vec<String>, String> {
    let rest = if given.is_empty() {
        c.cmd.clone()
    } else {
        given
    };
    let argv: Vec<String> = c.entrypoint.iter().cloned().chain(rest).collect();
    if argv.is_empty() {
        return Err(
            "the image's config names no entrypoint and no cmd: give the command after --".into(),
        );
    }
    Ok(argv)
}

/// The run's variables: the image's `Env`, then the caller's (which win
/// over the image's of the same name). Of the image's, what the sandbox
/// sets itself (HOME, TMPDIR, the proxy variables) and the node's own
/// (`OZ0_`) are left out, each named in the returned notes; one that is
/// not a variable refuses the run.
pub(crate) fn env(
    c: &RunConfig,
    caller: Vec<EnvVar>,
) -> Result<(Vec<EnvVar>, Vec<String>), String> {
    let mut out: Vec<EnvVar> = Vec::new();
    let mut notes = Vec::new();
    for e in &c.env {
        let name = e.split('=').next().unwrap_or_default();
        if SANDBOX_SET.contains(&name)
            || PROXY_VARS.contains(&name)
            || name.starts_with(NODE_PREFIX)
        {
            notes.push(format!(
                "the image's variable {} is not passed: the sandbox sets it, or it is the node's",
                q(name)
            ));
            continue;
        }
        let v = EnvVar::parse(e).map_err(|why| format!("the image's variable {}: {why}", q(e)))?;
        out.retain(|o| o.name != v.name);
        out.push(v);
    }
    for v in caller {
        out.retain(|o| o.name != v.name);
        out.push(v);
    }
    Ok((out, notes))
}

/// A string of the image's, escaped.
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn show(r: &Reference, i: &Image, as_json: bool) {
    let c = &i.record.config;
    if as_json {
        crate::out::line(
            &serde_json::to_string_pretty(&json!({
                "image": r.to_string(),
                "digest": i.record.digest,
                "manifest": i.record.manifest,
                "config_digest": i.record.config_digest,
                "rootfs": i.rootfs,
                "pulled": i.pulled,
                "config": c,
                "layers": i.record.layers,
                "unpacked": i.record.unpacked,
            }))
            .expect("a pull serialises"),
        );
        return;
    }
    let list = |v: &[String]| serde_json::to_string(v).expect("strings serialise");
    let u = &i.record.unpacked;
    let mut out = vec![
        format!("image       {r}"),
        format!("rootfs      {}", q(&i.rootfs.to_string_lossy())),
        format!(
            "pulled      {}",
            if i.pulled {
                "yes"
            } else {
                "no: it was in the cache"
            }
        ),
        format!("entrypoint  {}", list(&c.entrypoint)),
        format!("cmd         {}", list(&c.cmd)),
    ];
    for e in &c.env {
        out.push(format!("env         {}", q(e)));
    }
    if let Some(w) = &c.working_dir {
        out.push(format!("workdir     {}", q(w)));
    }
    if let Some(user) = &c.user {
        out.push(format!(
            "user        {} (files are this node user's)",
            q(user)
        ));
    }
    out.push(format!(
        "unpacked    {} layers, {} entries, {} bytes",
        i.record.layers.len(),
        u.entries,
        u.bytes
    ));
    if u.cleared_bits > 0 {
        out.push(format!(
            "cleared     setuid/setgid/sticky bits of {}: {}",
            u.cleared_bits,
            list(&u.cleared_named)
        ));
    }
    if u.dropped_nodes > 0 {
        out.push(format!(
            "dropped     {} device nodes and pipes: {}",
            u.dropped_nodes,
            list(&u.dropped_named)
        ));
    }
    crate::out::print(&(out.join("\n") + "\n"));
}

/// The root of a run in `image`: its rootfs, and its working folder
/// (which must be an absolute path).
pub(crate) fn root(image: &Image) -> Result<ImageRoot, String> {
    let rootfs = crate::flags::utf8("the image's rootfs", &image.rootfs)?;
    let cwd = match image.record.config.working_dir.as_deref() {
        None | Some("") => None,
        Some(w) if w.starts_with('/') => Some(w.to_string()),
        Some(w) => {
            return Err(format!(
                "the image's working folder {} is not an absolute path",
                serde_json::to_string(w).expect("a string serialises")
            ))
        }
    };
    Ok(ImageRoot { rootfs, cwd })
}
