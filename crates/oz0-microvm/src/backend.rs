//! The two VMMs and the monitor command each runs inside tier 1.
//!
//! Both commands are pure functions of their inputs (golden-tested below):
//! they name paths and numbers only, never a secret, because the monitor's
//! command line is visible to other processes of the node's user.
//!
//! - **smolvm** (production): `machine create` → `start` → `exec` → `delete`
//!   in one tier-1 run, so that killing the run takes the VM with it. Its own
//!   seccomp and Landlock are set to enforce; `--net` is never used.
//! - **QEMU in software emulation** (tests only, `OZ0_MICROVM_TEST_BACKEND=qemu-tcg`):
//!   a Debian kernel and busybox initramfs (`scripts/build-test-guest.sh`),
//!   `-nic none`, `/work` and `/oz0` over 9p, and the `oz0.mux` virtio-serial
//!   port bound to a unix socket in the VM's folder. Only a build with the
//!   `test-backends` feature has it: there the node's probe may offer it,
//!   and its facts then say `backend: qemu-tcg (test)`; a shipped build
//!   refuses the variable.

use std::path::{Path, PathBuf};

use crate::pin::Vmm;

/// The variable that selects the test backend.
pub const TEST_BACKEND_VAR: &str = "OZ0_MICROVM_TEST_BACKEND";
/// Its one value.
pub const TEST_BACKEND_QEMU: &str = "qemu-tcg";
/// Names the folder `scripts/build-test-guest.sh` filled.
pub const TEST_GUEST_VAR: &str = "OZ0_MICROVM_TEST_GUEST";
/// Names the QEMU binary (default: `qemu-system-x86_64` on PATH).
pub const TEST_QEMU_VAR: &str = "OZ0_MICROVM_TEST_QEMU";

/// The node binary's name in the folder shared as the guest's `/oz0`.
pub const NODE_IN_GUEST: &str = "oz0-node";

/// The QEMU test guest: what `build-test-guest.sh` made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestGuest {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// The folder holding `vmlinuz` and `initrd.cpio`.
    pub dir: PathBuf,
}

impl TestGuest {
    /// The kernel: the uncompressed `vmlinux` when the script could
    /// extract it (it boots faster under emulation), else `vmlinuz`.
    pub fn kernel(&self) -> PathBuf {
        let raw = self.dir.join("vmlinux");
        if raw.is_file() {
            raw
        } else {
            self.dir.join("vmlinuz")
        }
    }
    /// The initramfs: `initrd.cpio`, or `initrd-<image>.cpio` for an image
    /// the test guest was built with (`build-test-guest-python.sh` makes
    /// `python`). The name is checked by [`TestGuest::check_image`].
    pub fn initrd(&self, image: Option<&str>) -> PathBuf {
        match image {
            None => self.dir.join("initrd.cpio"),
            Some(i) => self.dir.join(format!("initrd-{i}.cpio")),
        }
    }

    /// Refuses an image name that is not a plain name (`[a-z0-9-]`, at most
    /// 32) or that this test guest was not built with, naming the fix.
    pub fn check_image(&self, image: &str) -> Result<(), ImageError> {
        let plain = !image.is_empty()
            && image.len() <= 32
            && image
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !plain {
            return Err(ImageError::NotAName(image.to_string()));
        }
        let f = self.initrd(Some(image));
        if !f.is_file() {
            return Err(ImageError::NotBuilt {
                image: image.to_string(),
                file: f,
                guest: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// The test-guest image an image reference stands for: its last path
    /// component, without tag or digest
    /// (`oci:oz0.test/python@sha256:…` is `python`). The test backend has
    /// no registry: its images are what the test guest was built with.
    pub fn image_for(package: &str) -> String {
        let r = package.strip_prefix("oci:").unwrap_or(package);
        let r = r.split('@').next().unwrap_or(r);
        let last = r.rsplit('/').next().unwrap_or(r);
        last.split(':').next().unwrap_or(last).to_string()
    }
}

/// An image the QEMU test backend does not have.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// Not a plain name.
    #[error("--image {0:?}: the QEMU test backend takes the name of a test-guest image ([a-z0-9-], e.g. `python`)")]
    NotAName(String),
    /// The test guest was not built with it.
    #[error("--image {image}: the test guest has no {} (build it: scripts/build-test-guest-{image}.sh {})", file.display(), guest.display())]
    NotBuilt {
        /// The image.
        image: String,
        /// The file it needs.
        file: PathBuf,
        /// The test guest's folder.
        guest: PathBuf,
    },
}

/// Which VMM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// smolvm on KVM.
    Smolvm(Vmm),
    /// QEMU/TCG, for tests.
    QemuTcg(TestGuest),
}

impl Backend {
    /// For reports: backend and acceleration.
    pub fn describe(&self) -> &'static str {
        match self {
            Backend::Smolvm(_) => "smolvm (libkrun, KVM)",
            Backend::QemuTcg(_) => "qemu (software emulation, TCG; test backend)",
        }
    }
}

/// What the monitor is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorInput<'a> {
    /// The shared work folder (host path; the same path inside tier 1).
    pub work: &'a Path,
    /// The VM's `vmm/` folder.
    pub vmm_dir: &'a Path,
    /// Memory, MiB.
    pub memory_mib: u32,
    /// Whole vCPUs.
    pub cpus: u32,
    /// The folder holding only the node binary (`oz0-node`), shared
    /// read-only with the guest as `/oz0`.
    pub node_dir: &'a Path,
    /// The image (`--image`): for smolvm an OCI reference, archive or
    /// rootfs folder; for the QEMU test backend a test-guest image name.
    pub image: Option<&'a str>,
}

/// The QEMU command inside tier 1.
pub fn qemu_argv(g: &TestGuest, m: &MonitorInput<'_>) -> Vec<String> {
    let p = |x: &Path| x.display().to_string();
    let vmm = |n: &str| p(&m.vmm_dir.join(n));
    let mut a: Vec<String> = vec![p(&g.qemu)];
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
    push(&["-nodefaults", "-no-user-config", "-no-reboot"]);
    push(&["-machine", "pc,accel=tcg", "-cpu", "max"]);
    push(&["-display", "none", "-vga", "none", "-monitor", "none"]);
    // No network device at all.
    push(&["-nic", "none"]);
    // QEMU's own seccomp filter on top of tier 1's.
    push(&[
        "-sandbox",
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
    ]);
    let mem = m.memory_mib.to_string();
    let cpus = m.cpus.to_string();
    push(&["-m", &mem, "-smp", &cpus]);
    let (kernel, initrd) = (p(&g.kernel()), p(&g.initrd(m.image)));
    push(&["-kernel", &kernel, "-initrd", &initrd]);
    push(&[
        "-append",
        "console=ttyS0 panic=-1 loglevel=4 rdinit=/init tsc=reliable no_timer_check",
    ]);
    let console = format!("file,id=con,path={}", vmm("console.log"));
    push(&["-chardev", &console, "-serial", "chardev:con"]);
    let mux = format!("socket,id=mux,path={}", vmm("mux.sock"));
    push(&["-device", "virtio-serial-pci,id=vs"]);
    push(&["-chardev", &mux]);
    push(&[
        "-device",
        &format!(
            "virtserialport,bus=vs.0,chardev=mux,name={}",
            crate::guest::PORT_NAME
        ),
    ]);
    let work = format!("local,id=work,path={},security_model=none", p(m.work));
    push(&[
        "-fsdev",
        &work,
        "-device",
        "virtio-9p-pci,fsdev=work,mount_tag=work",
    ]);
    let node = format!(
        "local,id=oz0,path={},security_model=none,readonly=on",
        p(m.node_dir)
    );
    push(&[
        "-fsdev",
        &node,
        "-device",
        "virtio-9p-pci,fsdev=oz0,mount_tag=oz0",
    ]);
    a
}

/// One smolvm run: everything the script needs, none of it secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmolvmRun<'a> {
    /// The monitor's input.
    pub m: MonitorInput<'a>,
    /// The VM's name.
    pub name: String,
    /// Guest uid and gid.
    pub uid: u32,
    /// Guest gid.
    pub gid: u32,
    /// The names of the server's variables; each value is in smolvm's own
    /// environment as `OZ0_VMENV_<NAME>`, which it resolves by name
    /// (`--secret-env NAME=OZ0_VMENV_NAME`).
    pub env_names: Vec<&'a str>,
    /// With egress: the run's proxy socket (inside tier 1 at
    /// `EGRESS_SOCKET_INSIDE`) is mounted into the guest, the node binary
    /// is shared read-only at `/oz0`, and the server runs under the guest
    /// bridge ([`crate::smolguest`]).
    pub egress: bool,
    /// The server's command.
    pub command: &'a [String],
    /// Where smolvm's stderr goes (the probe reads it), or the caller's.
    pub log: Option<PathBuf>,
    /// Keep stdin open (`-i`): the server's MCP input.
    pub interactive: bool,
}

/// What separates smolvm's command lines in the monitor's script's
/// arguments; no argument of a server's command may be it (see `prepare`).
pub const PART_MARK: &str = "--oz0--";

/// The monitor's argv for smolvm: `/bin/sh -c` with a script whose
/// arguments are the four smolvm command lines, separated by `--oz0--`.
pub fn smolvm_argv(vmm: &Vmm, r: &SmolvmRun<'_>) -> Vec<String> {
    let cli = vmm.cli.display().to_string();
    let mut create = machine("create", &r.name);
    create.extend([
        "-v".into(),
        format!("{}:/work", r.m.work.display()),
        "--cpus".into(),
        r.m.cpus.to_string(),
        "--mem".into(),
        r.m.memory_mib.to_string(),
    ]);
    if let Some(i) = r.m.image {
        create.push("--image".into());
        create.push(i.to_string());
    }
    if r.egress {
        create.push("-v".into());
        create.push(format!("{}:/oz0:ro", r.m.node_dir.display()));
        create.push("--mount-socket".into());
        create.push(format!(
            "{}:{}",
            oz0_linux::plan::EGRESS_SOCKET_INSIDE,
            crate::smolguest::GUEST_EGRESS_SOCKET
        ));
    }
    let start = machine("start", &r.name);
    let exec = smolvm_exec(r);
    let mut delete = machine("delete", &r.name);
    delete.push("-f".into());
    // Without a log, smolvm's own messages go to the run's stderr by
    // descriptor: reopening `/dev/stderr` (through /proc) is refused when
    // the caller's stderr is a file of another user.
    let log = r
        .log
        .as_ref()
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    // The script splits its arguments at `--oz0--` into the four command
    // lines; nothing is interpolated into its text.
    let script = r#"cli=$1; log=$2; shift 2
if [ -n "$log" ]; then exec 3>>"$log"; else exec 3>&2; fi
a=""; b=""; c=""; d=""; part=1
for x in "$@"; do
  if [ "$x" = "--oz0--" ]; then part=$((part+1)); continue; fi
  case $part in
    1) a="$a$(printf '%s\037' "$x")";; 2) b="$b$(printf '%s\037' "$x")";;
    3) c="$c$(printf '%s\037' "$x")";; 4) d="$d$(printf '%s\037' "$x")";;
  esac
done
run() { IFS=$(printf '\037'); set -f; set -- $1; unset IFS; "$cli" "$@"; }
status=0
run "$a" 2>&3 && run "$b" 2>&3 || status=$?
if [ "$status" = 0 ]; then run "$c" 3>&-; status=$?; fi
run "$d" >/dev/null 2>&3
exit $status"#;
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        script.into(),
        "oz0-smolvm".into(),
        cli,
        log,
    ];
    for (i, part) in [create, start, exec, delete].into_iter().enumerate() {
        if i > 0 {
            argv.push(PART_MARK.into());
        }
        argv.extend(part);
    }
    argv
}

/// `machine VERB --name NAME`: the start of each smolvm command line.
fn machine(verb: &str, name: &str) -> Vec<String> {
    vec!["machine".into(), verb.into(), "--name".into(), name.into()]
}

/// `machine exec`: the server as the node's uid and gid in `/work`, its
/// variables by name (`--secret-env`), and with egress the guest's bridge
/// in front of it.
fn smolvm_exec(r: &SmolvmRun<'_>) -> Vec<String> {
    let mut exec = machine("exec", &r.name);
    exec.extend([
        "-u".into(),
        format!("{}:{}", r.uid, r.gid),
        "-w".into(),
        "/work".into(),
        "-e".into(),
        "HOME=/tmp".into(),
        "-e".into(),
        "TMPDIR=/tmp".into(),
        "-e".into(),
        format!(
            "{}={}",
            oz0_policy::describe::SANDBOX_VAR,
            oz0_policy::describe::MICROVM_VALUE
        ),
    ]);
    if r.interactive {
        exec.push("-i".into());
    }
    let secret = |guest: &str| format!("{guest}={}{guest}", oz0_linux::plan::VM_SECRET_PREFIX);
    for n in &r.env_names {
        exec.push("--secret-env".into());
        exec.push(secret(n));
    }
    if r.egress {
        exec.push("--secret-env".into());
        exec.push(secret(crate::smolguest::TOKEN_VAR));
    }
    exec.push("--".into());
    if r.egress {
        exec.extend([
            format!("/oz0/{NODE_IN_GUEST}"),
            crate::smolguest::EGRESS_ARG.into(),
            crate::smolguest::GUEST_EGRESS_SOCKET.into(),
            "--".into(),
        ]);
    }
    exec.extend(r.command.iter().cloned());
    exec
}

/// smolvm's own variables: its libraries, its agent, its data under the
/// VM's folder, its seccomp and Landlock set to enforce, and its uid drop
/// off (tier 1 is the monitor's unprivileged wall).
pub fn smolvm_env(vmm: &Vmm, vmm_dir: &Path) -> Vec<(String, String)> {
    let d = vmm_dir.display().to_string();
    let mut env = vec![
        (
            "SMOLVM_LIB_DIR".to_string(),
            vmm.lib_dir.display().to_string(),
        ),
        ("SMOLVM_SECCOMP".into(), "enforce".into()),
        ("SMOLVM_LANDLOCK".into(), "enforce".into()),
        // smolvm, when it runs as uid 0, drops to a per-VM uid by chowning
        // its files to it; inside tier 1 no other uid is mapped, so that
        // fails. The monitor is already unprivileged there (no capability,
        // seccomp, Landlock, its own user namespace), which is what the
        // drop is for.
        ("SMOLVM_VM_UID_DROP".into(), "off".into()),
        ("XDG_DATA_HOME".into(), format!("{d}/data")),
        ("XDG_CACHE_HOME".into(), format!("{d}/cache")),
        ("XDG_CONFIG_HOME".into(), format!("{d}/config")),
        ("XDG_RUNTIME_DIR".into(), format!("{d}/run")),
    ];
    if let Some((_, p)) = vmm
        .files
        .iter()
        .find(|(r, _)| *r == crate::pin::Role::AgentRootfs)
    {
        env.push(("SMOLVM_AGENT_ROOTFS".into(), p.display().to_string()));
    }
    // The release tarball's program finds its libraries as its own
    // `smolvm` script has it find them.
    if vmm.lib_dir != vmm.dir {
        env.push(("LD_LIBRARY_PATH".into(), vmm.lib_dir.display().to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_command_has_no_network_and_one_shared_work_folder() {
        let g = TestGuest {
            qemu: "/usr/bin/qemu-system-x86_64".into(),
            dir: "/g".into(),
        };
        let m = MonitorInput {
            work: Path::new("/w"),
            vmm_dir: Path::new("/tmp/oz0-vm-1-2/vmm"),
            memory_mib: 256,
            cpus: 1,
            node_dir: Path::new("/tmp/oz0-vm-1-2/node"),
            image: None,
        };
        let a = qemu_argv(&g, &m);
        let s = a.join(" ");
        assert!(s.contains("-nic none") && s.contains("-nodefaults"), "{s}");
        assert!(!s.contains("-netdev") && !s.contains("virtio-net"), "{s}");
        assert_eq!(a.iter().filter(|x| x.starts_with("local,")).count(), 2);
        assert!(s.contains("local,id=work,path=/w,security_model=none "));
        assert!(s.contains("path=/tmp/oz0-vm-1-2/node,security_model=none,readonly=on"));
        assert!(s.contains("socket,id=mux,path=/tmp/oz0-vm-1-2/vmm/mux.sock"));
        assert!(s.contains("name=oz0.mux"));
        assert!(s.contains("-m 256 -smp 1"));
        assert!(s.contains("-initrd /g/initrd.cpio "), "{s}");
        let py = qemu_argv(
            &g,
            &MonitorInput {
                image: Some("python"),
                ..m
            },
        );
        assert!(py.join(" ").contains("-initrd /g/initrd-python.cpio "));
    }

    #[test]
    fn test_guest_images_are_plain_names_the_guest_was_built_with() {
        let dir = std::env::temp_dir().join(format!("oz0-guest-img-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("initrd-python.cpio"), b"").unwrap();
        let g = TestGuest {
            qemu: "/usr/bin/qemu-system-x86_64".into(),
            dir: dir.clone(),
        };
        assert!(g.check_image("python").is_ok());
        let missing = g.check_image("node").unwrap_err().to_string();
        assert!(
            missing.contains("initrd-node.cpio") && missing.contains("build-test-guest-node.sh"),
            "{missing}"
        );
        for bad in ["", "../x", "a/b", "Python", "x.cpio", &"a".repeat(33)] {
            let e = g.check_image(bad).unwrap_err().to_string();
            assert!(e.contains("[a-z0-9-]"), "{bad:?}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn smolvm_script_never_uses_net_and_carries_no_secret_value() {
        let vmm = Vmm {
            dir: "/opt/smolvm".into(),
            cli: "/opt/smolvm/smol-vmm".into(),
            lib_dir: "/opt/smolvm".into(),
            files: vec![(
                crate::pin::Role::AgentRootfs,
                "/opt/smolvm/agent-rootfs.tar".into(),
            )],
            pinned: true,
            warning: None,
        };
        let cmd = vec!["/app/server".to_string(), "--stdio".into()];
        let r = SmolvmRun {
            m: MonitorInput {
                work: Path::new("/w"),
                vmm_dir: Path::new("/tmp/oz0-vm-a-b/vmm"),
                memory_mib: 512,
                cpus: 2,
                node_dir: Path::new("/tmp/oz0-vm-a-b/node"),
                image: Some("oci:x"),
            },
            name: "oz0-a".into(),
            uid: 1000,
            gid: 1000,
            env_names: vec!["ACME_TOKEN"],
            egress: false,
            command: &cmd,
            log: None,
            interactive: true,
        };
        let a = smolvm_argv(&vmm, &r);
        assert!(!a.iter().any(|x| x == "--net"));
        let s = a[3..].join(" ");
        assert_eq!(
            s,
            "oz0-smolvm /opt/smolvm/smol-vmm  \
machine create --name oz0-a -v /w:/work --cpus 2 --mem 512 --image oci:x --oz0-- \
machine start --name oz0-a --oz0-- \
machine exec --name oz0-a -u 1000:1000 -w /work -e HOME=/tmp -e TMPDIR=/tmp -e OZ0_SANDBOX=tier=2;wall=microvm -i \
--secret-env ACME_TOKEN=OZ0_VMENV_ACME_TOKEN -- /app/server --stdio --oz0-- \
machine delete --name oz0-a -f"
        );
        // With egress: the proxy socket and the node binary go in, the token
        // by name, and the server runs under the guest bridge.
        let e = smolvm_argv(
            &vmm,
            &SmolvmRun {
                egress: true,
                ..r.clone()
            },
        );
        let s = e[3..].join(" ");
        assert!(!e.iter().any(|x| x == "--net"));
        assert!(
            s.contains("--image oci:x -v /tmp/oz0-vm-a-b/node:/oz0:ro --mount-socket /oz0/egress.sock:/run/oz0/egress.sock --oz0--"),
            "{s}"
        );
        assert!(
            s.contains("--secret-env ACME_TOKEN=OZ0_VMENV_ACME_TOKEN --secret-env OZ0_EGRESS_TOKEN=OZ0_VMENV_OZ0_EGRESS_TOKEN \
-- /oz0/oz0-node __oz0-vm-egress /run/oz0/egress.sock -- /app/server --stdio --oz0--"),
            "{s}"
        );
        let env = smolvm_env(&vmm, Path::new("/tmp/oz0-vm-a-b/vmm"));
        assert!(env.contains(&("SMOLVM_SECCOMP".into(), "enforce".into())));
        assert!(env.contains(&("SMOLVM_LANDLOCK".into(), "enforce".into())));
        assert!(env.contains(&("SMOLVM_VM_UID_DROP".into(), "off".into())));
    }
}

/// The VMM from the environment: the test backend when
/// `OZ0_MICROVM_TEST_BACKEND=qemu-tcg`, else smolvm per `OZ0_MICROVM`;
/// and a warning to print, if any.
pub fn backend_from_env() -> Result<(Backend, Option<String>), BackendError> {
    match std::env::var(TEST_BACKEND_VAR).ok().as_deref() {
        None | Some("") => {}
        Some(TEST_BACKEND_QEMU) if !cfg!(feature = "test-backends") => {
            return Err(BackendError::TestBackendsNotBuilt)
        }
        Some(TEST_BACKEND_QEMU) => {
            let dir = std::env::var_os(TEST_GUEST_VAR)
                .map(PathBuf::from)
                .ok_or(BackendError::NoTestGuest)?;
            let qemu = std::env::var_os(TEST_QEMU_VAR)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/usr/bin/qemu-system-x86_64"));
            let g = TestGuest { qemu, dir };
            for p in [g.kernel(), g.initrd(None), g.qemu.clone()] {
                if !p.is_file() {
                    return Err(BackendError::TestGuestMissing(p));
                }
            }
            let warning = "this VM runs in the QEMU test backend (software emulation): a test fixture of a test build, never a shipped node's microVM";
            return Ok((Backend::QemuTcg(g), Some(warning.into())));
        }
        Some(other) => return Err(BackendError::UnknownTestBackend(other.to_string())),
    }
    let sel =
        crate::pin::Selection::from_value(std::env::var(crate::pin::MICROVM_VAR).ok().as_deref());
    let vmm = crate::pin::select(&sel, std::env::var("PATH").ok().as_deref())?;
    let warning = vmm.warning.clone();
    Ok((Backend::Smolvm(vmm), warning))
}

/// Why no VMM can be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The test backend without its guest.
    #[error("{TEST_BACKEND_VAR}=qemu-tcg needs {TEST_GUEST_VAR} naming the folder scripts/build-test-guest.sh filled")]
    NoTestGuest,
    /// A file of the test backend is missing.
    #[error("{} is missing: install qemu-system-x86 and run scripts/build-test-guest.sh", .0.display())]
    TestGuestMissing(PathBuf),
    /// A test backend asked of a build without them.
    #[error("{TEST_BACKEND_VAR} names a test backend, and this oz0-node is built without them (they exist only in test builds, feature test-backends): unset {TEST_BACKEND_VAR}")]
    TestBackendsNotBuilt,
    /// An unknown test backend.
    #[error("{TEST_BACKEND_VAR}={0:?} is not a test backend: the one there is is qemu-tcg")]
    UnknownTestBackend(String),
    /// No usable smolvm.
    #[error(transparent)]
    Vmm(#[from] crate::pin::PinError),
}
