//! The proof of the container path: a run in an image's root
//! (`oz0_core::Role::Image`) through the same door as every run, with the
//! node binary's `sandbox probe` as the witness inside, judged on what makes
//! that path differ from tier 1's other runs. The eight-property self-test
//! proves the wall itself (namespaces, seccomp, Landlock, limits, egress);
//! what an image's root changes is the file system, so the witness shows:
//!
//! - the image's own files are there, and read-only;
//! - none of the host's system (`/etc/passwd`) and no caller path but the
//!   work folder, which is at `/work` and writable;
//! - the node's data directory is not there, by its path;
//! - no network: a listener the check opened on the host's loopback is
//!   not reached;
//! - no capability, no new privileges, the seccomp filter on (gVisor:
//!   no capability; its own kernel is the filter).
//!
//! Through tier 1 the witness is the node binary tier 1 binds at
//! `/oz0/oz0-node`; through gVisor, which binds nothing of the node's, it
//! is a copy of it (and of its loader and libraries, for a dynamically
//! linked build) in the check's image.
//!
//! The image is one the node makes for the check: a folder holding a
//! marker file, in a folder of its own under `base`, removed after. Each
//! judgement can fail: `tests` runs the check with the data directory
//! exposed (a self-test fault), and without an image's root at all.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use oz0_core::selftest::Failed;
use oz0_core::{Fault, ImageRoot, Outcome, Role, RunIo, RunOptions, Sandbox};
use oz0_policy::{RunRequest, RunSpec};

use crate::plan::{NODE_BIN_INSIDE, NODE_LIBS_INSIDE};

/// The marker file in the check's image, and what it holds.
const MARKER: (&str, &str) = ("srv/oz0-image-marker", "oz0 image root\n");

/// The runtime under check.
pub enum Runs<'a> {
    /// The image's root inside tier 1.
    Tier1(&'a crate::Tier1),
    /// gVisor, with the node binary to copy into the check's image.
    Gvisor(&'a crate::gvisor::Gvisor, &'a Path),
}

/// What the check needs.
pub struct ImageCheck<'a> {
    /// The runtime.
    pub runs: Runs<'a>,
    /// The node's data directory.
    pub data_dir: &'a Path,
    /// Where the check's folder is made (by its real path).
    pub base: PathBuf,
    /// A fault for every run (the check's own tests only).
    pub fault: Option<Fault>,
    /// Run without an image's root (the check's own tests only).
    pub no_image: bool,
}

/// The check's folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A new private folder `<tag>-<pid>-<run id>` under `base`.
    fn new(base: &Path, tag: &str) -> Result<Scratch, Failed> {
        let dir = base.join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            crate::record::new_run_id()
        ));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(os("the check's folder"))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn os(what: &str) -> impl FnOnce(std::io::Error) -> Failed + '_ {
    move |e| Failed::from(format!("{what}: {e}"))
}

impl ImageCheck<'_> {
    /// Runs the check: Ok with what it showed, or how it failed.
    pub fn run(&self) -> Result<String, Failed> {
        let scratch = Scratch::new(&self.base, "oz0-image-check")?;
        let rootfs = scratch.0.join("rootfs");
        let work = scratch.0.join("work");
        fs::create_dir_all(rootfs.join("srv")).map_err(os("the check's image"))?;
        fs::create_dir(&work).map_err(os("the check's work folder"))?;
        fs::write(rootfs.join(MARKER.0), MARKER.1).map_err(os("the check's image"))?;
        let key = self.data_dir.join("identity").join("node.key");
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(os("a loopback listener"))?;
        let port = listener
            .local_addr()
            .map_err(os("a loopback listener"))?
            .port();
        let probe = [
            "--read",
            "/etc/passwd",
            "--read",
            &format!("/{}", MARKER.0),
            "--read",
            &key.display().to_string(),
            "--list",
            &self.data_dir.display().to_string(),
            "--write",
            "/work/written",
            "--write",
            "/srv/written",
            "--write",
            "/written",
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--no-syscalls",
        ]
        .map(String::from);
        let report = self.probe(&rootfs, &work, &probe)?;
        drop(listener);
        judge(
            &report,
            &key,
            self.data_dir,
            matches!(self.runs, Runs::Tier1(_)),
        )?;
        if !work.join("written").exists() {
            return Err("the witness's write to /work did not reach the work folder".into());
        }
        Ok("the image's files read-only, nothing of the host's system or data directory, the work folder at /work, no capability, seccomp on".into())
    }

    /// Runs the witness with `args` in the image at `rootfs`: its report.
    fn probe(
        &self,
        rootfs: &Path,
        work: &Path,
        args: &[String],
    ) -> Result<serde_json::Value, Failed> {
        let utf8 = |p: &Path| p.to_str().map(str::to_string).ok_or("a path is not UTF-8");
        let role = if self.no_image {
            Role::Command
        } else {
            Role::Image(ImageRoot {
                rootfs: utf8(rootfs)?,
                cwd: None,
                user: None,
            })
        };
        let mut command = vec![
            NODE_BIN_INSIDE.to_string(),
            "sandbox".into(),
            "probe".into(),
        ];
        command.extend_from_slice(args);
        let spec = RunSpec::new(RunRequest {
            work: utf8(work)?,
            data_dir: utf8(self.data_dir)?,
            command,
            ..RunRequest::default()
        })
        .map_err(|e| Failed::from(e.to_string()))?;
        // A dynamically linked node runs through its loader there.
        let (runs, loader): (&dyn Sandbox, _) = match self.runs {
            Runs::Tier1(t) => {
                let extras =
                    crate::extras_for(role.clone()).map_err(|e| Failed::from(e.to_string()))?;
                let plan = t
                    .plan(&spec, &extras)
                    .map_err(|e| Failed::from(format!("the run could not be planned: {e}")))?;
                (t, plan.loader)
            }
            Runs::Gvisor(g, node_exe) => (g, copy_witness(node_exe, rootfs)?),
        };
        let spec = match loader {
            None => spec,
            Some(loader) => {
                let mut c = vec![
                    loader.to_string(),
                    "--library-path".into(),
                    NODE_LIBS_INSIDE.into(),
                ];
                c.extend(spec.command.iter().cloned());
                let mut s = spec;
                s.command = c;
                s
            }
        };
        let out = tempfile_in(work.parent().unwrap_or(work))?;
        let io = RunIo::files(
            out.try_clone().map_err(os("the witness's output"))?,
            tempfile_in(work.parent().unwrap_or(work))?,
        );
        let opts = RunOptions {
            role,
            fault: self.fault.clone(),
            ..RunOptions::new(io, None)
        };
        let o: Outcome = runs
            .run(&spec, opts)
            .map_err(|e| Failed::from(format!("the run in an image's root was refused: {e}")))?;
        if o.exit_code != 0 {
            return Err(format!(
                "the witness in an image's root exited with {} ({})",
                o.exit_code,
                o.describe().1.unwrap_or_default()
            )
            .into());
        }
        let text = read_all(out)?;
        serde_json::from_str(&text)
            .map_err(|e| format!("the witness's report is not JSON ({e})").into())
    }
}

/// Copies the node binary `node_exe` into the image at `rootfs` (at
/// `/oz0/oz0-node`) with its loader and libraries (at `/oz0/lib`): the
/// loader inside, when there is one.
fn copy_witness(node_exe: &Path, rootfs: &Path) -> Result<Option<oz0_policy::AbsPath>, Failed> {
    let exe = oz0_policy::AbsPath::from_path(node_exe)
        .map_err(|e| Failed::from(format!("the node binary: {e}")))?;
    let libs = crate::host::node_libraries(&exe).map_err(|e| Failed::from(e.to_string()))?;
    let lib_dir = rootfs.join(NODE_LIBS_INSIDE.trim_start_matches('/'));
    fs::create_dir_all(&lib_dir).map_err(os("the check's image"))?;
    let dest = rootfs.join(NODE_BIN_INSIDE.trim_start_matches('/'));
    fs::copy(node_exe, &dest).map_err(os("a copy of the node binary"))?;
    fs::set_permissions(&dest, fs::Permissions::from_mode(0o755))
        .map_err(os("a copy of the node binary"))?;
    let mut loader = None;
    for l in &libs {
        let name = l.as_str().rsplit('/').next().unwrap_or_default();
        fs::copy(l.as_path(), lib_dir.join(name)).map_err(os("a copy of the node's libraries"))?;
        if loader.is_none() {
            loader = oz0_policy::AbsPath::new(&format!("{NODE_LIBS_INSIDE}/{name}")).ok();
        }
    }
    Ok(loader)
}

/// A file of the check's, for the witness's output.
fn tempfile_in(dir: &Path) -> Result<fs::File, Failed> {
    let p = dir.join(format!("out-{}", crate::record::new_run_id()));
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .map_err(os("the witness's output"))
}

fn read_all(mut f: fs::File) -> Result<String, Failed> {
    use std::io::{Read, Seek};
    f.rewind().map_err(os("the witness's output"))?;
    let mut s = String::new();
    f.take(1 << 20)
        .read_to_string(&mut s)
        .map_err(os("the witness's output"))?;
    Ok(s)
}

/// What the witness must have seen (`filter`: the seccomp filter and no
/// new privileges too).
fn judge(r: &serde_json::Value, key: &Path, data_dir: &Path, filter: bool) -> Result<(), Failed> {
    let at = |k: &str, p: &str| r[k][p].as_str().unwrap_or("missing").to_string();
    if at("read", "/etc/passwd") == "ok" {
        return Err(
            "the host's /etc/passwd could be read: the host's system is in the image's root".into(),
        );
    }
    let key = key.display().to_string();
    let data = data_dir.display().to_string();
    if at("read", &key) == "ok" || at("list", &data) == "ok" {
        return Err(format!(
            "the node's data directory {data} could be listed or its key read in an image's root"
        )
        .into());
    }
    let marker = format!("/{}", MARKER.0);
    if at("read", &marker) != "ok" {
        return Err(format!(
            "the image's own file {marker} could not be read ({})",
            at("read", &marker)
        )
        .into());
    }
    if at("write", "/work/written") != "ok" {
        return Err(format!(
            "the work folder at /work could not be written ({})",
            at("write", "/work/written")
        )
        .into());
    }
    for p in ["/srv/written", "/written"] {
        if at("write", p) == "ok" {
            return Err(format!("{p} could be written: the image's root is not read-only").into());
        }
    }
    for set in ["cap_eff", "cap_prm", "cap_inh", "cap_bnd", "cap_amb"] {
        // gVisor's kernel has no ambient or inheritable line: only the
        // sets it reports are judged, and the effective, permitted and
        // bounding ones always.
        let optional = !filter && matches!(set, "cap_inh" | "cap_amb");
        if optional && r[set].is_null() {
            continue;
        }
        if r[set] != "0000000000000000" {
            return Err(format!("{set} is {} in an image's root", r[set]).into());
        }
    }
    match r["connect"].as_object().and_then(|c| c.iter().next()) {
        Some((addr, got)) if got == "ok" => {
            return Err(
                format!("{addr} on the host's loopback was reached from an image's root").into(),
            )
        }
        Some(_) => {}
        None => return Err("the witness did not report its connection".into()),
    }
    if filter && (r["no_new_privs"] != "1" || r["seccomp"] != "2") {
        return Err(format!(
            "no_new_privs {} and seccomp {} in an image's root",
            r["no_new_privs"], r["seccomp"]
        )
        .into());
    }
    Ok(())
}

/// Tier 1 with every command's root an image's: the self-test's runs go
/// through it to prove the container path (`Role::Image` set on each run
/// that has no other role). With no image (its own tests only), the runs
/// are tier 1's own.
pub struct InImage<'a> {
    /// Tier 1.
    pub inner: &'a crate::Tier1,
    /// The image's rootfs, or none.
    pub rootfs: Option<String>,
}

impl Sandbox for InImage<'_> {
    fn tier(&self) -> u8 {
        1
    }

    fn run(&self, spec: &RunSpec, mut opts: RunOptions) -> Result<Outcome, oz0_core::RunError> {
        if let (Role::Command, Some(rootfs)) = (&opts.role, &self.rootfs) {
            opts.role = Role::Image(ImageRoot {
                rootfs: rootfs.clone(),
                cwd: None,
                user: None,
            });
        }
        Sandbox::run(self.inner, spec, opts)
    }
}

/// What the container path's self-test injects (its own tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFault {
    /// A property's own fault, as in tier 1's self-test.
    Property(oz0_policy::facts::Property),
    /// No image's root at all: tier 1's own runs.
    NoImage,
}

/// The image-specific judgements of [`ImageCheck`], after the files check
/// held.
struct ImageProofs<'a> {
    check: ImageCheck<'a>,
}

impl oz0_core::selftest::Extra for ImageProofs<'_> {
    fn prove(
        &self,
        p: oz0_policy::facts::Property,
        _: &mut oz0_core::selftest::Session<'_>,
    ) -> Result<Option<String>, Failed> {
        if p != oz0_policy::facts::Property::Files {
            return Ok(None);
        }
        self.check.run().map(Some)
    }
}

/// A static busybox of the host's (Debian's busybox-static), for the
/// shell the self-test's checks need inside its image.
const STATIC_SHELL: &str = "/bin/busybox";

/// Whether the ELF file `b` needs no dynamic loader (no `PT_INTERP`).
fn is_static_elf(b: &[u8]) -> bool {
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8).map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        })
    };
    // ELF64, little-endian.
    if b.get(..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    (0..usize::from(phnum)).all(|i| {
        let at = phoff + i * usize::from(phentsize);
        // PT_INTERP is 3; a header that cannot be read is not static.
        u32_at(at).is_some_and(|t| t != 3)
    })
}

/// The eight-property self-test through the container path: every run of
/// it in an image's root (a shell, the node's witness), through tier 1 as
/// the self-test has it (`host`: `LinuxWall::self_test_host`), with
/// [`ImageCheck`]'s judgements added after
/// the files check. The image is one it makes: a static busybox of the
/// host's as its shell (`/bin/sh`; none refuses, naming the package), and,
/// for a dynamically linked node, a `/bin/oz0-probe` that starts the witness
/// through its loader. Each line goes to `on_line`.
pub fn self_test_in_image(
    host: &crate::Tier1,
    data_dir: &Path,
    fault: Option<ImageFault>,
    on_line: impl FnMut(&oz0_core::Line),
) -> Result<oz0_core::SelfTest, Failed> {
    // Read once: the bytes judged static are the bytes the image gets.
    let Some(shell) = fs::read(STATIC_SHELL).ok().filter(|b| is_static_elf(b)) else {
        return Err(format!("the self-test in an image's root needs a static shell for its checks, and {STATIC_SHELL} is none: apt-get install busybox-static").into());
    };
    let scratch = Scratch::new(&std::env::temp_dir(), "oz0-image-selftest")?;
    let rootfs = scratch.0.join("rootfs");
    let bin = rootfs.join("bin");
    fs::create_dir_all(&bin).map_err(os("the self-test's image"))?;
    let busybox = bin.join("busybox");
    fs::write(&busybox, &shell).map_err(os("the self-test's shell"))?;
    fs::set_permissions(&busybox, fs::Permissions::from_mode(0o755))
        .map_err(os("the self-test's shell"))?;
    // The shell, and what the checks and the witness start by path.
    for applet in ["sh", "sleep", "mv", "cat", "true"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet))
            .map_err(os("the self-test's shell"))?;
    }
    let node = oz0_policy::AbsPath::from_path(host.node_exe())
        .map_err(|e| Failed::from(format!("the node binary: {e}")))?;
    let libs = crate::host::node_libraries(&node).map_err(|e| Failed::from(e.to_string()))?;
    let no_image = fault == Some(ImageFault::NoImage);
    let probe = match libs.first() {
        // Tier 1's own runs have the host's libraries.
        _ if no_image => NODE_BIN_INSIDE.to_string(),
        None => NODE_BIN_INSIDE.to_string(),
        Some(loader) => {
            let name = loader.as_str().rsplit('/').next().unwrap_or_default();
            let script = format!(
                // What the shell itself sets goes, so that the witness
                // sees exactly the run's variables.
                "#!/bin/sh\nunset SHLVL PWD OLDPWD\nexec {NODE_LIBS_INSIDE}/{name} --library-path {NODE_LIBS_INSIDE} {NODE_BIN_INSIDE} \"$@\"\n"
            );
            let p = bin.join("oz0-probe");
            fs::write(&p, script).map_err(os("the self-test's probe"))?;
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755))
                .map_err(os("the self-test's probe"))?;
            "/bin/oz0-probe".to_string()
        }
    };
    let runs = InImage {
        inner: host,
        rootfs: (!no_image)
            .then(|| rootfs.to_str().map(str::to_string))
            .flatten(),
    };
    let proofs = ImageProofs {
        check: ImageCheck {
            runs: Runs::Tier1(host),
            data_dir,
            base: scratch.0.clone(),
            fault: None,
            no_image,
        },
    };
    let mut cfg = oz0_core::selftest::Config::new(&runs, probe, scratch.0.clone());
    cfg.data_dir = Some(data_dir.to_path_buf());
    cfg.extra = Some(&proofs);
    cfg.files_layer = "in an image's root: ";
    if let Some(ImageFault::Property(p)) = fault {
        cfg.fault = Some(p);
    }
    Ok(oz0_core::selftest::run(&cfg, on_line))
}
