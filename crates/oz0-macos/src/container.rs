//! macOS tier 2: Apple's `container` (1.5.0 or later, macOS 26, Apple
//! silicon) — whether it is offered, and the argument list that runs one
//! microVM tool server.
//!
//! Each tool runs with `container run --rm --network none --read-only
//! --cap-drop ALL`, as the node's uid:gid, with whole CPUs (rounded up), its
//! memory, `--ulimit nproc` (Apple's runtime has no process limit of its
//! own), the work folder at `/work`. With egress, still no network device:
//! the guest node binary's folder read-only at `/oz0`, whose bridge runs
//! the server (`__oz0-vm-egress --accept`), and a socket published from
//! the VM to a file in the run's private folder, over which the node opens
//! the connections that carry the server's to the proxy
//! (`oz0_egress::reverse`). Its variables reach
//! it only through an env file that only the node's user can read, removed
//! when the tool stops ([`EnvFile`]); a value with a line break is refused.
//! Apple's VMs are started by its own launchd services, so they are not
//! inside tier 1: their kernel is the boundary.

use std::io::Write;
use std::path::{Path, PathBuf};

use oz0_policy::AbsPath;
use serde::Serialize;

/// The CLI (found on `PATH` by the caller).
pub const CONTAINER: &str = "container";
/// The oldest `container` release we use.
pub const MIN_VERSION: (u32, u32, u32) = (1, 5, 0);
/// The first macOS major release `container` supports.
pub const MIN_MACOS: u32 = 26;
/// Most CPUs a tool may ask for.
pub const MAX_CPUS: u32 = 64;
/// Most memory a tool may ask for, MiB.
pub const MAX_MEMORY_MIB: u64 = 256 * 1024;

/// The Mac's processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// Apple silicon.
    Arm64,
    /// Intel.
    X86_64,
}

/// What the node found about this Mac.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MacFacts {
    /// The processor.
    pub arch: Arch,
    /// macOS major version (`sw_vers -productVersion`), when read.
    pub macos_major: Option<u32>,
    /// `container --version`, when found on `PATH`.
    pub container_version: Option<(u32, u32, u32)>,
    /// `container system status` answered.
    pub services_answer: bool,
}

/// Why microVMs are not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotOffered {
    /// An Intel Mac.
    IntelMac,
    /// macOS before 26 (or unknown).
    MacosTooOld,
    /// `container` not found.
    NotInstalled,
    /// `container` older than 1.5.0.
    ContainerTooOld,
    /// Its services do not answer.
    ServicesDown,
}

impl NotOffered {
    /// The reason, for `facts.microvm.reason` and logs.
    pub fn reason(self) -> &'static str {
        match self {
            NotOffered::IntelMac => "an Intel Mac: neither microVM runtime runs on it",
            NotOffered::MacosTooOld => "macOS before 26: Apple's container needs macOS 26, and smolvm's monitor has no tier-1 sandbox on macOS, so the node never runs it",
            NotOffered::NotInstalled => "Apple's container is not on PATH: install container 1.5.0 or later (its signed installer) and run `container system start` in the node's user session",
            NotOffered::ContainerTooOld => "Apple's container is older than 1.5.0: install 1.5.0 or later",
            NotOffered::ServicesDown => "Apple's container services do not answer: run `container system start` in the node's user session",
        }
    }
}

/// Whether this Mac offers microVMs, and if not, why.
pub fn availability(f: &MacFacts) -> Result<(), NotOffered> {
    if f.arch != Arch::Arm64 {
        return Err(NotOffered::IntelMac);
    }
    if f.macos_major.is_none_or(|m| m < MIN_MACOS) {
        return Err(NotOffered::MacosTooOld);
    }
    match f.container_version {
        None => return Err(NotOffered::NotInstalled),
        Some(v) if v < MIN_VERSION => return Err(NotOffered::ContainerTooOld),
        Some(_) => {}
    }
    if !f.services_answer {
        return Err(NotOffered::ServicesDown);
    }
    Ok(())
}

/// One tool server's needs, from its manifest and the node.
#[derive(Clone, PartialEq)]
pub struct VmTool {
    /// The image, pinned by digest (`ghcr.io/acme/fetch-mcp@sha256:…`).
    pub image: String,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// CPUs (fractions are rounded up to whole CPUs).
    pub cpus: f64,
    /// Most processes in the VM.
    pub nproc: u32,
    /// The node's uid and gid (the guest user).
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// The job's work folder, shared at `/work`.
    pub work: AbsPath,
    /// With egress: the proxy socket's folder and the guest binary's folder.
    pub egress: Option<VmEgress>,
    /// The server's command inside the image (may be empty: the image's own).
    pub command: Vec<String>,
    /// The VM's name (`oz0-<id>`), so that it can be stopped and deleted
    /// by name whatever ends the tool.
    pub name: String,
}

impl std::fmt::Debug for VmTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmTool")
            .field("image", &self.image)
            .field("memory_mib", &self.memory_mib)
            .field("cpus", &self.cpus)
            .finish_non_exhaustive()
    }
}

/// Egress for a tool: the host end of the socket the VM publishes, and the
/// Linux node binary the guest's bridge runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmEgress {
    /// Where the runtime makes the published socket's host end (it must not
    /// exist; its folder only the node's user can enter).
    pub host_socket: AbsPath,
    /// The guest binary; its folder is shared read-only at `/oz0`.
    pub guest_bin: AbsPath,
}

/// Why a tool cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The image is not pinned or looks like an option.
    #[error("image {0:?} must be a reference pinned by digest (name@sha256:<64 hex>), with no spaces and not starting with '-'")]
    Image(String),
    /// CPUs out of range.
    #[error("cpus {0} must be more than 0 and at most {MAX_CPUS}")]
    Cpus(String),
    /// Memory out of range.
    #[error("memory_mb {0} must be between 1 and {MAX_MEMORY_MIB}")]
    Memory(u64),
    /// nproc zero.
    #[error("the process limit must be at least 1")]
    Nproc,
    /// A variable a tool may not name.
    #[error("a microVM tool may not set {0}: PATH, HOME, TMPDIR, proxy variables, LD_*, DYLD_* and OZ0_* are the sandbox's")]
    ReservedVar(String),
    /// A bad name.
    #[error("{0:?} is not a variable name: use letters, digits and _, not starting with a digit")]
    BadName(String),
    /// A value with a line break.
    #[error("the value of {0} contains a line break, which an env file cannot carry: pass it without one")]
    LineBreak(String),
    /// A value with NUL.
    #[error("the value of {0} contains a NUL byte")]
    Nul(String),
    /// A name `container` would misread.
    #[error("the VM's name {0:?} must be 1 to 64 of a-z 0-9 - and start with a letter")]
    Name(String),
    /// A tool with egress whose server is the image's own entrypoint: the
    /// bridge must start the server, so it needs the command.
    #[error("a microVM tool with egress needs command: in its manifest on a Mac: the guest's bridge starts the server, and the image's own entrypoint is not known here")]
    EgressWithoutCommand,
    /// The guest binary is not a file in a folder.
    #[error("the guest binary {0} is not a file in a folder")]
    GuestBin(String),
    /// A shared folder whose path the mount syntax cannot carry.
    #[error("{0} contains ':' or ',', which container's --volume/--mount syntax would misread: use a folder without them")]
    MountPath(String),
    /// Writing the env file failed.
    #[error("writing the env file {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        error: String,
    },
}

fn check_image(image: &str) -> Result<(), ContainerError> {
    let pinned = image.split_once("@sha256:").is_some_and(|(name, digest)| {
        !name.is_empty()
            && digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    });
    if !pinned
        || image.starts_with('-')
        || image.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ContainerError::Image(image.chars().take(120).collect()));
    }
    Ok(())
}

/// Whole CPUs for a fractional request (rounded up).
pub fn whole_cpus(cpus: f64) -> Result<u32, ContainerError> {
    if !cpus.is_finite() || cpus <= 0.0 || cpus > f64::from(MAX_CPUS) {
        return Err(ContainerError::Cpus(cpus.to_string()));
    }
    // Checked just above: finite and in (0, MAX_CPUS], so the ceiling is a
    // whole number in 1..=MAX_CPUS, which a u32 holds.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = cpus.ceil() as u32;
    Ok(whole)
}

/// Checks a tool's variables and renders the env file: `NAME=VALUE` lines.
pub fn render_env_file(vars: &[(String, String)]) -> Result<String, ContainerError> {
    render_env_file_with(vars, &[])
}

/// [`render_env_file`], then the node's own variables `own` (the run's
/// egress token), which may use the names a tool may not.
pub fn render_env_file_with(
    vars: &[(String, String)],
    own: &[(String, String)],
) -> Result<String, ContainerError> {
    const RESERVED: &[&str] = &["PATH", "HOME", "TMPDIR"];
    const PROXY: &[&str] = &[
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "FTP_PROXY",
    ];
    let mut out = String::new();
    for (name, value) in vars {
        let shape = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !shape {
            return Err(ContainerError::BadName(name.chars().take(64).collect()));
        }
        let upper = name.to_ascii_uppercase();
        if RESERVED.contains(&name.as_str())
            || PROXY.contains(&upper.as_str())
            || upper.starts_with("LD_")
            || upper.starts_with("DYLD_")
            || upper.starts_with("OZ0_")
        {
            return Err(ContainerError::ReservedVar(name.clone()));
        }
        line(&mut out, name, value)?;
    }
    for (name, value) in own {
        line(&mut out, name, value)?;
    }
    Ok(out)
}

fn line(out: &mut String, name: &str, value: &str) -> Result<(), ContainerError> {
    if value.contains(['\n', '\r']) {
        return Err(ContainerError::LineBreak(name.to_string()));
    }
    if value.contains('\0') {
        return Err(ContainerError::Nul(name.to_string()));
    }
    out.push_str(name);
    out.push('=');
    out.push_str(value);
    out.push('\n');
    Ok(())
}

/// An env file readable by the node's user only (mode 0600, created new),
/// removed when dropped (the tool has stopped).
#[derive(Debug)]
pub struct EnvFile {
    path: PathBuf,
}

impl EnvFile {
    /// Writes the file at `path`, which must not exist.
    pub fn create(path: &Path, vars: &[(String, String)]) -> Result<EnvFile, ContainerError> {
        EnvFile::create_with(path, vars, &[])
    }

    /// [`EnvFile::create`] with the node's own variables `own` too (see
    /// [`render_env_file_with`]).
    pub fn create_with(
        path: &Path,
        vars: &[(String, String)],
        own: &[(String, String)],
    ) -> Result<EnvFile, ContainerError> {
        let text = render_env_file_with(vars, own)?;
        let io = |e: std::io::Error| ContainerError::Io {
            path: path.display().to_string(),
            error: e.to_string(),
        };
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(path).map_err(io)?;
        let file = EnvFile {
            path: path.to_path_buf(),
        };
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        Ok(file)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for EnvFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `container stop` and `container delete --force` for the VM `name`:
/// what ends a tool's VM whatever ended the tool (`--rm` alone needs the
/// CLI that started it to see the end).
pub fn stop_argvs(name: &str) -> [Vec<String>; 2] {
    [
        vec![CONTAINER.into(), "stop".into(), name.into()],
        vec![
            CONTAINER.into(),
            "delete".into(),
            "--force".into(),
            name.into(),
        ],
    ]
}

/// The VM's name in `container run`'s arguments (`--name NAME`), as
/// [`run_argv`] puts it.
pub fn vm_name(argv: &[String]) -> Option<&str> {
    if argv.first().map(String::as_str) != Some(CONTAINER)
        || argv.get(1).map(String::as_str) != Some("run")
    {
        return None;
    }
    let i = argv.iter().position(|a| a == "--name")?;
    let name = argv.get(i + 1)?;
    let ok = name.starts_with("oz0-")
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then_some(name.as_str())
}

/// `container run …` for one tool server, with its env file.
pub fn run_argv(tool: &VmTool, env_file: &AbsPath) -> Result<Vec<String>, ContainerError> {
    check_image(&tool.image)?;
    let cpus = whole_cpus(tool.cpus)?;
    if tool.memory_mib == 0 || tool.memory_mib > MAX_MEMORY_MIB {
        return Err(ContainerError::Memory(tool.memory_mib));
    }
    if tool.nproc == 0 {
        return Err(ContainerError::Nproc);
    }
    let name_ok = (1..=64).contains(&tool.name.len())
        && tool.name.as_bytes()[0].is_ascii_lowercase()
        && tool
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !name_ok {
        return Err(ContainerError::Name(tool.name.chars().take(64).collect()));
    }
    let shared = std::iter::once(&tool.work).chain(
        tool.egress
            .iter()
            .flat_map(|e| [&e.host_socket, &e.guest_bin]),
    );
    for d in shared {
        if d.as_str().contains([':', ',']) {
            return Err(ContainerError::MountPath(d.to_string()));
        }
    }
    let mut a: Vec<String> = [
        CONTAINER,
        "run",
        "--rm",
        "--interactive",
        "--network",
        "none",
        "--read-only",
        "--cap-drop",
        "ALL",
    ]
    .map(String::from)
    .to_vec();
    let mut push = |k: &str, v: String| {
        a.push(k.to_string());
        a.push(v);
    };
    push("--name", tool.name.clone());
    push("--user", format!("{}:{}", tool.uid, tool.gid));
    push("--cpus", cpus.to_string());
    push("--memory", format!("{}M", tool.memory_mib));
    push("--ulimit", format!("nproc={0}:{0}", tool.nproc));
    push("--env-file", env_file.as_str().to_string());
    push("--env", "HOME=/tmp".into());
    push("--tmpfs", "/tmp".into());
    push("--volume", format!("{}:/work", tool.work));
    push("--workdir", "/work".into());
    let mut command = tool.command.clone();
    if let Some(e) = &tool.egress {
        if tool.command.is_empty() {
            return Err(ContainerError::EgressWithoutCommand);
        }
        let (dir, file) = e
            .guest_bin
            .as_str()
            .rsplit_once('/')
            .filter(|(d, f)| !d.is_empty() && !f.is_empty())
            .ok_or_else(|| ContainerError::GuestBin(e.guest_bin.to_string()))?;
        push(
            "--publish-socket",
            format!("{}:{}", e.host_socket, oz0_egress::reverse::GUEST_SOCKET),
        );
        push(
            "--mount",
            format!("type=bind,source={dir},target=/oz0,readonly"),
        );
        command = [
            format!("/oz0/{file}"),
            oz0_egress::reverse::WRAPPER_ARG.into(),
            oz0_egress::reverse::ACCEPT_FLAG.into(),
            oz0_egress::reverse::GUEST_SOCKET.into(),
            "--".into(),
        ]
        .into_iter()
        .chain(command)
        .collect();
    }
    a.push(tool.image.clone());
    a.extend(command);
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> VmTool {
        VmTool {
            image: format!("ghcr.io/acme/fetch-mcp@sha256:{}", "4f6c0d1b".repeat(8)),
            memory_mib: 512,
            cpus: 1.5,
            nproc: 256,
            uid: 501,
            gid: 20,
            work: AbsPath::new("/Users/me/oz0/jobs/j1").unwrap(),
            egress: None,
            command: vec![],
            name: "oz0-j1".into(),
        }
    }

    #[test]
    fn golden_argv_without_and_with_egress() {
        let env = AbsPath::new("/private/var/folders/xy/T/oz0-env-j1").unwrap();
        let a = run_argv(&tool(), &env).unwrap();
        assert_eq!(
            a.join(" "),
            "container run --rm --interactive --network none --read-only --cap-drop ALL --name oz0-j1 --user 501:20 --cpus 2 --memory 512M --ulimit nproc=256:256 --env-file /private/var/folders/xy/T/oz0-env-j1 --env HOME=/tmp --tmpfs /tmp --volume /Users/me/oz0/jobs/j1:/work --workdir /work ghcr.io/acme/fetch-mcp@sha256:4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b"
        );
        let mut t = tool();
        t.egress = Some(VmEgress {
            host_socket: AbsPath::new("/private/var/folders/xy/T/oz0-run-j1/e.sock").unwrap(),
            guest_bin: AbsPath::new(
                "/Users/me/Library/Application Support/oz0/microvm/guest/0.1.0/oz0-node",
            )
            .unwrap(),
        });
        assert_eq!(
            run_argv(&t, &env).unwrap_err(),
            ContainerError::EgressWithoutCommand
        );
        t.command = vec!["/app/server".into(), "--stdio".into()];
        let a = run_argv(&t, &env).unwrap();
        let tail = a[a.len() - 12..].to_vec();
        assert_eq!(
            tail,
            [
                "--publish-socket",
                "/private/var/folders/xy/T/oz0-run-j1/e.sock:/tmp/oz0-egress.sock",
                "--mount",
                "type=bind,source=/Users/me/Library/Application Support/oz0/microvm/guest/0.1.0,target=/oz0,readonly",
                "ghcr.io/acme/fetch-mcp@sha256:4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b4f6c0d1b",
                "/oz0/oz0-node",
                "__oz0-vm-egress",
                "--accept",
                "/tmp/oz0-egress.sock",
                "--",
                "/app/server",
                "--stdio",
            ]
        );
        // Still no network device.
        assert!(a.windows(2).any(|w| w == ["--network", "none"]));
        // No value of any variable is on the command line.
        assert!(!a
            .iter()
            .any(|x| x.starts_with("--env=") || x.contains("SECRET")));
    }

    #[test]
    fn cpus_round_up_to_whole() {
        assert_eq!(whole_cpus(0.25).unwrap(), 1);
        assert_eq!(whole_cpus(1.0).unwrap(), 1);
        assert_eq!(whole_cpus(1.01).unwrap(), 2);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 65.0] {
            assert!(whole_cpus(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals() {
        let env = AbsPath::new("/private/tmp/e").unwrap();
        type Edit = fn(&mut VmTool);
        let cases: &[(Edit, &str)] = &[
            (
                |t| t.image = "ghcr.io/acme/fetch-mcp:latest".into(),
                "pinned by digest",
            ),
            (
                |t| t.image = format!("-v@sha256:{}", "a".repeat(64)),
                "pinned by digest",
            ),
            (|t| t.memory_mib = 0, "memory_mb"),
            (|t| t.nproc = 0, "process limit"),
            (|t| t.name = "-rm".into(), "name"),
            (|t| t.name = "Oz0".into(), "name"),
            (
                |t| t.work = AbsPath::new("/Users/me/a:b").unwrap(),
                "misread",
            ),
        ];
        for (edit, want) in cases {
            let mut t = tool();
            edit(&mut t);
            let e = run_argv(&t, &env).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn env_file_rules_and_lifecycle() {
        let v = |n: &str, val: &str| (n.to_string(), val.to_string());
        assert_eq!(
            render_env_file(&[v("API_KEY", "s3cr=t"), v("MODE", "")]).unwrap(),
            "API_KEY=s3cr=t\nMODE=\n"
        );
        for (name, val, want) in [
            ("TOKEN", "a\nb", "line break"),
            ("TOKEN", "a\rb", "line break"),
            ("PATH", "/x", "may not set"),
            ("https_proxy", "x", "may not set"),
            ("LD_PRELOAD", "x", "may not set"),
            ("DYLD_INSERT_LIBRARIES", "x", "may not set"),
            ("OZ0_TOKEN", "x", "may not set"),
            ("1X", "x", "not a variable name"),
        ] {
            let e = render_env_file(&[v(name, val)]).unwrap_err().to_string();
            assert!(e.contains(want), "{name}: {e}");
        }
        let dir = std::env::temp_dir().join(format!("oz0-macos-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("env");
        {
            let f = EnvFile::create(&path, &[v("A", "1")]).unwrap();
            assert_eq!(std::fs::read_to_string(f.path()).unwrap(), "A=1\n");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(f.path()).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600);
            }
            assert!(EnvFile::create(&path, &[]).is_err(), "never reuses a file");
        }
        assert!(!path.exists(), "removed after");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn availability_table() {
        let ok = MacFacts {
            arch: Arch::Arm64,
            macos_major: Some(26),
            container_version: Some((1, 5, 0)),
            services_answer: true,
        };
        assert_eq!(availability(&ok), Ok(()));
        type Edit = fn(&mut MacFacts);
        let cases: &[(Edit, NotOffered)] = &[
            (|f| f.arch = Arch::X86_64, NotOffered::IntelMac),
            (|f| f.macos_major = Some(15), NotOffered::MacosTooOld),
            (|f| f.macos_major = None, NotOffered::MacosTooOld),
            (|f| f.container_version = None, NotOffered::NotInstalled),
            (
                |f| f.container_version = Some((1, 4, 9)),
                NotOffered::ContainerTooOld,
            ),
            (
                |f| f.container_version = Some((0, 9, 0)),
                NotOffered::ContainerTooOld,
            ),
            (|f| f.services_answer = false, NotOffered::ServicesDown),
        ];
        for (edit, want) in cases {
            let mut f = ok.clone();
            edit(&mut f);
            assert_eq!(availability(&f), Err(*want));
            assert!(!want.reason().is_empty());
        }
        let mut intel_old = ok;
        intel_old.arch = Arch::X86_64;
        intel_old.macos_major = Some(14);
        assert_eq!(availability(&intel_old), Err(NotOffered::IntelMac));
        assert!(NotOffered::IntelMac.reason().contains("Intel"));
    }

    #[test]
    fn only_a_named_container_run_is_a_vm_it_can_stop() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            vm_name(&argv(&[
                CONTAINER, "run", "--rm", "--name", "oz0-ab12", "img"
            ])),
            Some("oz0-ab12")
        );
        for bad in [
            argv(&["/bin/sh", "run", "--name", "oz0-a"]),
            argv(&[CONTAINER, "exec", "--name", "oz0-a"]),
            argv(&[CONTAINER, "run", "--name"]),
            argv(&[CONTAINER, "run", "--name", "other"]),
            argv(&[CONTAINER, "run", "--name", "oz0-A;x"]),
        ] {
            assert_eq!(vm_name(&bad), None, "{bad:?}");
        }
    }
}
