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
    let client = client(a).map_err(usage)?;
    let max = a.cache_mib.saturating_mul(1 << 20);
    let image = Cache::open(data_dir, max)
        .and_then(|c| c.pull(&client, &r))
        .map_err(|e| failed(format!("{r}: {e}")))?;
    Ok((r, image))
}

/// What a run of `image` starts with, read from its registry (its manifest
/// and config, each checked against its digest; no layer is fetched): for a
/// VM that pulls the image itself and is given the command to run.
pub fn run_config(image: &str, a: &OciArgs) -> Result<RunConfig, FetchError> {
    let usage = |msg: String| FetchError { msg, usage: true };
    let r = Reference::parse(image).map_err(|e| usage(e.to_string()))?;
    let client = client(a).map_err(usage)?;
    let resolved = oz0_oci::cache::resolve(&client, &r).map_err(|e| FetchError {
        msg: format!("{r}: {e}"),
        usage: false,
    })?;
    Ok(resolved.config.run)
}

/// A registry client for the registries, credentials and CAs `a` names.
fn client(a: &OciArgs) -> Result<Client, String> {
    Client::new(&Options {
        allowed: a.registries.clone(),
        auth_file: a.auth.clone(),
        ca_file: a.ca.clone(),
    })
    .map_err(|e| e.to_string())
}

fn pull(a: PullArgs) -> i32 {
    let data_dir = match a.data.resolve() {
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
/// (the caller's arguments) or, when none are given, its cmd. `fix` says
/// how to give a command when the image names none.
pub(crate) fn command(c: &RunConfig, given: Vec<String>, fix: &str) -> Result<Vec<String>, String> {
    let rest = if given.is_empty() {
        c.cmd.clone()
    } else {
        given
    };
    let argv: Vec<String> = c.entrypoint.iter().cloned().chain(rest).collect();
    if argv.is_empty() {
        return Err(format!(
            "the image's config names no entrypoint and no cmd: {fix}"
        ));
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

/// A string of the image's, escaped: quoted as JSON, with the control
/// characters JSON leaves as they are (DEL, C1, the line separators)
/// escaped too, so none reaches a terminal.
fn q(s: &str) -> String {
    oz0_edge::term::json(s).expect("a string serialises")
}

fn show(r: &Reference, i: &Image, as_json: bool) {
    let c = &i.record.config;
    if as_json {
        crate::out::line(
            &oz0_edge::term::json(&json!({
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
    let list = |v: &[String]| {
        let quoted: Vec<String> = v.iter().map(|s| q(s)).collect();
        format!("[{}]", quoted.join(","))
    };
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
        // /oz0 holds the node's own mounts in the run (its binary, the
        // host's /dev while the run's is built): never a working folder.
        Some(w) if w == "/oz0" || w.starts_with("/oz0/") => {
            return Err(format!(
                "the image's working folder {} is under /oz0, which is the node's own in a run: the image is refused",
                q(w)
            ))
        }
        Some(w) if w.starts_with('/') => Some(w.to_string()),
        Some(w) => {
            return Err(format!(
                "the image's working folder {} is not an absolute path",
                q(w)
            ))
        }
    };
    let user = image_user(&image.rootfs, image.record.config.user.as_deref())?;
    Ok(ImageRoot { rootfs, cwd, user })
}

/// At most this much of an image's `/etc/passwd` or `/etc/group` is read.
const MAX_ID_FILE: u64 = 1 << 20;

/// The lines of the image's `etc/<name>` (under `rootfs`, reached without
/// any link: the image's own files only), or none when it has none.
fn id_file(rootfs: &Path, name: &str) -> Result<Vec<String>, String> {
    use std::io::Read;
    let root = oz0_linux::hostfs::open_no_links(
        rootfs,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
    )
    .map_err(|e| format!("the image's rootfs: {e}"))?;
    let path = format!("etc/{name}");
    let fd = match oz0_linux::hostfs::open_beneath(
        &root,
        Path::new(&path),
        rustix::fs::OFlags::RDONLY,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => {
            return Err(format!(
                "the image's /{path} cannot be read without a link: {e}"
            ))
        }
    };
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_ID_FILE)
        .read_to_string(&mut text)
        .map_err(|e| format!("the image's /{path}: {e}"))?;
    Ok(text.lines().map(str::to_string).collect())
}

/// The ids of `who` (a name or a number) in the image's `etc/<file>`
/// lines (`name:x:id:…`): (id, the passwd line's group), when found.
fn lookup(lines: &[String], who: &str) -> Option<(u32, Option<u32>)> {
    lines.iter().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let id: u32 = f.get(2)?.parse().ok()?;
        (f[0] == who || who.parse() == Ok(id)).then(|| (id, f.get(3).and_then(|g| g.parse().ok())))
    })
}

/// The ids the image's `User` names (`uid`, `uid:gid`, `name`,
/// `name:group`), by its own `/etc/passwd` and `/etc/group` for names; a
/// user without a group has its passwd line's group, or 0 as containers
/// have it. A name the image does not have refuses the run.
fn image_user(rootfs: &Path, user: Option<&str>) -> Result<Option<(u32, u32)>, String> {
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = id_file(rootfs, "passwd")?;
    let named = |what: &str, who: &str, file: &str| {
        format!(
            "the image's {what} {} is not in its /etc/{file}: the image cannot run as it",
            q(who)
        )
    };
    let (uid, primary) = match (u.parse::<u32>(), lookup(&passwd, u)) {
        (Ok(n), found) => (n, found.and_then(|f| f.1)),
        (Err(_), Some((n, g))) => (n, g),
        (Err(_), None) => return Err(named("user", u, "passwd")),
    };
    let gid = match g {
        None => primary.unwrap_or(0),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => lookup(&id_file(rootfs, "group")?, g)
                .map(|(n, _)| n)
                .ok_or_else(|| named("group", g, "group"))?,
        },
    };
    Ok(Some((uid, gid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers, names by the image's own files, a link refused, and a
    /// name it does not have.
    #[test]
    fn the_image_user_is_read_from_its_own_files() {
        let dir = std::env::temp_dir().join(format!("oz0-oci-user-{}", std::process::id()));
        let etc = dir.join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/app:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(etc.join("group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        assert_eq!(image_user(&dir, None).unwrap(), None);
        assert_eq!(image_user(&dir, Some("")).unwrap(), None);
        assert_eq!(image_user(&dir, Some("1000")).unwrap(), Some((1000, 1001)));
        assert_eq!(image_user(&dir, Some("4242")).unwrap(), Some((4242, 0)));
        assert_eq!(image_user(&dir, Some("app")).unwrap(), Some((1000, 1001)));
        assert_eq!(
            image_user(&dir, Some("app:staff")).unwrap(),
            Some((1000, 50))
        );
        assert_eq!(image_user(&dir, Some("7:8")).unwrap(), Some((7, 8)));
        let e = image_user(&dir, Some("nobody")).unwrap_err();
        assert!(e.contains("not in its /etc/passwd"), "{e}");
        let e = image_user(&dir, Some("app:wheel")).unwrap_err();
        assert!(e.contains("not in its /etc/group"), "{e}");
        // An /etc/passwd that is a link (to the host's) is refused.
        std::fs::remove_file(etc.join("passwd")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", etc.join("passwd")).unwrap();
        let e = image_user(&dir, Some("root")).unwrap_err();
        assert!(e.contains("without a link"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
