//! The boot check that decides whether this node offers microVMs: `ready`
//! only when a test VM booted inside tier 1 and answered, within a timeout.
//!
//! A usable `/dev/kvm` proves nothing (a software KVM module can accept
//! `KVM_CREATE_VM` and then fail every real guest); only a boot does. The
//! QEMU test backend is never probed here: it never makes a node
//! `isolation.microvm=ready`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oz0_core::{Ended, RunIo};
use oz0_linux::{HostConfig, Tier1};
use oz0_policy::facts::{Microvm, MicrovmBackend, MicrovmReason};
use oz0_policy::{AbsPath, EnvVar, Limits, RunRequest, RunSpec};
use serde::Serialize;

use crate::backend::{self, MonitorInput, SmolvmRun};
use crate::pin::{self, PinError, Selection};
use crate::vmdir::VmDir;

/// Default time a test VM has to boot and answer.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the probe needs to know.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// From `OZ0_MICROVM`.
    pub selection: Selection,
    /// `PATH`, to find smolvm.
    pub path_var: Option<String>,
    /// Whether this node has tier 1 (its self-test passed).
    pub tier1: bool,
    /// The node's host context's parts: the test VM's monitor runs through
    /// it, in tier 1. Its data directory is the node's.
    pub host: HostConfig,
    /// The node's data directory.
    pub data_dir: PathBuf,
    /// The temp dir for the test VM's folder.
    pub tmp: PathBuf,
    /// The KVM device (normally `/dev/kvm`).
    pub kvm: PathBuf,
    /// How long the test VM has.
    pub timeout: Duration,
    /// `std::env::consts::OS`/`ARCH` of this build.
    pub platform: (&'static str, &'static str),
    /// `OZ0_MICROVM_TEST_BACKEND`, when set: the probe boots the test
    /// backend (a test build only) instead of smolvm.
    pub test_backend: bool,
}

impl ProbeOptions {
    /// The node's defaults, from its environment.
    pub fn from_env(tier1: bool, host: HostConfig, data_dir: PathBuf) -> Self {
        ProbeOptions {
            selection: Selection::from_value(std::env::var(pin::MICROVM_VAR).ok().as_deref()),
            path_var: std::env::var("PATH").ok(),
            tier1,
            host: HostConfig {
                data_dir: Some(data_dir.clone()),
                ..host
            },
            data_dir,
            tmp: std::env::temp_dir(),
            kvm: PathBuf::from(crate::vm::KVM_DEVICE),
            timeout: DEFAULT_PROBE_TIMEOUT,
            platform: (std::env::consts::OS, std::env::consts::ARCH),
            test_backend: std::env::var_os(backend::TEST_BACKEND_VAR)
                .is_some_and(|v| !v.is_empty()),
        }
    }
}

/// The probe's answer: the facts, and the detail for logs.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// What the node reports (`facts.microvm`).
    pub microvm: Microvm,
    /// One line for the log: what happened, and the fix.
    pub detail: String,
    /// A warning (an unpinned VMM named by `OZ0_MICROVM`).
    pub warning: Option<String>,
    /// How long the test boot took, when one was tried.
    pub boot_ms: Option<u64>,
}

fn no(reason: MicrovmReason, pinned: Option<bool>, detail: impl Into<String>) -> ProbeReport {
    ProbeReport {
        microvm: Microvm {
            ready: false,
            reason: Some(reason),
            pinned,
            backend: None,
        },
        detail: detail.into(),
        warning: None,
        boot_ms: None,
    }
}

/// Reads the smolvm log for a kernel that refused to make a VM.
pub fn classify_failure(log: &str) -> MicrovmReason {
    let l = log.to_ascii_lowercase();
    if l.contains("kvm_create_vm")
        || (l.contains("kvm")
            && l.contains("create")
            && (l.contains("refused") || l.contains("failed") || l.contains("error")))
    {
        MicrovmReason::KvmRefused
    } else {
        MicrovmReason::TestVmDidNotBoot
    }
}

/// The host context a test VM's monitor runs through: only with tier 1.
fn tier1_host(o: &ProbeOptions) -> Result<Tier1, ProbeReport> {
    match (o.tier1, Tier1::open(o.host.clone())) {
        (true, Ok(h)) => Ok(h),
        _ => Err(no(
            MicrovmReason::NoTier1,
            None,
            "no tier 1 on this node, and a VM monitor never runs outside it: fix tier 1 first (sandbox check)",
        )),
    }
}

/// Probes microVM support on this node.
pub fn probe(o: &ProbeOptions) -> ProbeReport {
    if o.selection == Selection::Off {
        return no(
            MicrovmReason::Off,
            None,
            format!("microVMs are turned off ({}=off)", pin::MICROVM_VAR),
        );
    }
    if o.test_backend {
        return probe_test_backend(o);
    }
    if o.platform.0 != "linux" || !pin::pinned_arches().contains(&o.platform.1) {
        return no(
            MicrovmReason::Unsupported,
            None,
            format!(
                "this build pins smolvm for linux on {} only, not {}/{}",
                pin::pinned_arches().join(" and "),
                o.platform.0,
                o.platform.1
            ),
        );
    }
    let host = match tier1_host(o) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let vmm = match pin::select(&o.selection, o.path_var.as_deref()) {
        Ok(v) => v,
        Err(e @ (PinError::NotFound | PinError::Missing { .. })) => {
            return no(MicrovmReason::NoVmm, None, e.to_string())
        }
        Err(e @ PinError::Unpinned { .. }) => {
            return no(MicrovmReason::Unpinned, Some(false), e.to_string())
        }
        Err(e) => return no(MicrovmReason::NoVmm, None, e.to_string()),
    };
    let pinned = Some(vmm.pinned);
    let warning = vmm.warning.clone();
    let with_warning = |mut r: ProbeReport| {
        r.warning = warning.clone();
        r
    };
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&o.kvm)
    {
        Ok(_) => {}
        Err(e) => {
            let (reason, fix) = if e.kind() == std::io::ErrorKind::NotFound {
                (
                    MicrovmReason::NoHardwareVirtualisation,
                    "this machine offers no hardware virtualisation: enable VT-x/AMD-V (or nested virtualisation for a VM), or load the kvm module",
                )
            } else {
                (
                    MicrovmReason::NoKvmAccess,
                    "give the node's user /dev/kvm: sudo usermod -aG kvm <user>, then log in again",
                )
            };
            return with_warning(no(
                reason,
                pinned,
                format!("{}: {e}: {fix}", o.kvm.display()),
            ));
        }
    }
    with_warning(boot_smolvm(o, &host, &vmm, pinned))
}

fn boot_smolvm(
    o: &ProbeOptions,
    host: &Tier1,
    vmm: &pin::Vmm,
    pinned: Option<bool>,
) -> ProbeReport {
    let fail = |r, d: String| no(r, pinned, d);
    let vmdir = match VmDir::create(&o.tmp, &o.data_dir) {
        Ok(d) => d,
        Err(e) => {
            return fail(
                MicrovmReason::TestVmDidNotBoot,
                format!("the test VM's folder: {e}"),
            )
        }
    };
    let work = vmdir.dir.join("work");
    let vmm_dir = vmdir.vmm();
    if let Err(e) = std::fs::create_dir(&work) {
        return fail(
            MicrovmReason::TestVmDidNotBoot,
            format!("the test VM's folder: {e}"),
        );
    }
    let log = vmm_dir.join("smolvm.log");
    let spec = match test_vm_spec(o, vmm, &vmdir, &work, &log) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                MicrovmReason::NoTier1,
                format!("tier 1 refused the test VM's monitor: {e}"),
            )
        }
    };
    let kvm = match AbsPath::from_path(&o.kvm) {
        Ok(k) => k,
        Err(e) => return fail(MicrovmReason::NoKvmAccess, e.to_string()),
    };
    let started = Instant::now();
    let r = oz0_core::Sandbox::run(
        host,
        &spec,
        oz0_core::RunOptions {
            io: RunIo::quiet(),
            role: oz0_core::Role::Monitor(oz0_core::Monitor {
                devices: vec![kvm.as_str().to_string()],
                vmm_syscalls: true,
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let kernel = guest_kernel(&work);
    drop(vmdir);
    let mut rep = judge_boot(o, r, kernel, &log_text, ms, pinned);
    rep.boot_ms = Some(ms);
    rep
}

/// The test VM's monitor as a tier-1 run: smolvm booting a guest that says
/// which kernel it runs (in its working folder, /work). A VM has a kernel
/// of its own (another boot id); a VMM that runs the command on this
/// node's own kernel is no microVM, whatever it answers.
fn test_vm_spec(
    o: &ProbeOptions,
    vmm: &pin::Vmm,
    vmdir: &VmDir,
    work: &Path,
    log: &Path,
) -> Result<RunSpec, String> {
    let vmm_dir = vmdir.vmm();
    let cmd: Vec<String> = [
        "/bin/sh",
        "-c",
        "cat /proc/sys/kernel/random/boot_id > .oz0-boot-id",
    ]
    .map(String::from)
    .to_vec();
    let run = SmolvmRun {
        m: MonitorInput {
            work,
            vmm_dir: &vmm_dir,
            memory_mib: 256,
            cpus: 1,
            node_dir: &vmm_dir,
            image: None,
        },
        name: format!("oz0-probe-{}", vmdir.id),
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        env_names: Vec::new(),
        egress: false,
        command: &cmd,
        log: Some(log.to_path_buf()),
        interactive: false,
    };
    let s = |p: &Path| p.display().to_string();
    let env = backend::smolvm_env(vmm, &vmm_dir)
        .iter()
        .map(|(k, v)| EnvVar::new(k, v))
        .collect::<Result<Vec<EnvVar>, _>>()
        .map_err(|e| e.to_string())?;
    RunSpec::new(RunRequest {
        work: s(work),
        read: vec![s(&vmm.dir)],
        write: vec![s(&vmm_dir)],
        env,
        allow: Vec::new(),
        forward: Vec::new(),
        // The limits every VM's monitor gets, so the probe proves what
        // a tool's VM will have.
        limits: crate::vm::monitor_limits(
            256,
            &Limits {
                timeout_seconds: Some(o.timeout.as_secs().max(1)),
                ..Limits::default()
            },
        ),
        // The monitor talks to its guest over unix sockets in its own folder.
        allow_unix_sockets: true,
        data_dir: s(&o.data_dir),
        command: backend::smolvm_argv(vmm, &run),
    })
    .map_err(|e| e.to_string())
}

/// A line of smolvm's log as the node may print it: its colour sequences
/// (`ESC [ … letter`) dropped, every other control character shown as an
/// escape, so that nothing in it acts on a terminal.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte.
            while let Some(&n) = chars.peek() {
                chars.next();
                if ('\x40'..='\x7e').contains(&n) {
                    break;
                }
            }
        } else if c.is_control() {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// The verdict on a test boot: ready only when the monitor's run exited 0
/// and the guest said it runs a kernel of its own; else why not, with the
/// end of smolvm's log.
fn judge_boot(
    o: &ProbeOptions,
    r: Result<oz0_core::Outcome, oz0_core::RunError>,
    kernel: Kernel,
    log_text: &str,
    ms: u64,
    pinned: Option<bool>,
) -> ProbeReport {
    let fail = |r, d: String| no(r, pinned, d);
    let tail: String = log_text
        .lines()
        .rev()
        .take(3)
        .map(plain)
        .collect::<Vec<_>>()
        .join(" | ");
    match r {
        Err(e) => fail(MicrovmReason::NoTier1, format!("tier 1 refused the test VM's monitor: {e}")),
        Ok(out) if out.ended == Ended::Exited && out.exit_code == 0 && kernel != Kernel::Own => fail(
            MicrovmReason::TestVmDidNotBoot,
            match kernel {
                Kernel::Unsaid => "the test VM ended without saying which kernel it runs (its boot id): no microVMs".to_string(),
                _ => "the test \"VM\" ran on this node's own kernel (the same boot id): what was started is no virtual machine, so no microVMs".to_string(),
            },
        ),
        Ok(out) if out.ended == Ended::Exited && out.exit_code == 0 => ProbeReport {
            microvm: Microvm {
                ready: true,
                reason: None,
                pinned,
                backend: Some(MicrovmBackend::Smolvm),
            },
            detail: format!("smolvm booted inside tier 1 in {ms} ms"),
            warning: None,
            boot_ms: Some(ms),
        },
        Ok(out) if out.ended == Ended::Timeout => fail(
            MicrovmReason::TestVmDidNotBoot,
            format!(
                "/dev/kvm is there, but the test VM did not boot in {} s inside tier 1 (a KVM that accepts VMs and fails guests, e.g. nested or software virtualisation){}",
                o.timeout.as_secs(),
                if tail.is_empty() { String::new() } else { format!(": {tail}") }
            ),
        ),
        Ok(out) => fail(
            classify_failure(log_text),
            format!(
                "the test VM did not boot inside tier 1 (status {} after {ms} ms){}",
                out.exit_code,
                if tail.is_empty() { String::new() } else { format!(": {tail}") }
            ),
        ),
    }
}

/// The QEMU test backend, in a test build only: a test VM boots in it
/// inside tier 1 exactly as a tool's would, and must say it runs a kernel
/// of its own. Ready then, with `backend: qemu-tcg (test)` in the facts;
/// a build without test backends refuses (and offers no microVMs).
fn probe_test_backend(o: &ProbeOptions) -> ProbeReport {
    let (backend, _) = match backend::backend_from_env() {
        Ok(b) => b,
        Err(e) => return no(MicrovmReason::NoVmm, None, e.to_string()),
    };
    let host = match tier1_host(o) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let work = o
        .tmp
        .join(format!("oz0-probe-work-{}-{nanos}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&work) {
        return no(
            MicrovmReason::TestVmDidNotBoot,
            None,
            format!("the test VM's work folder {}: {e}", work.display()),
        );
    }
    let req = crate::vm::VmRequest {
        work: work.clone(),
        memory_mib: 256,
        cpus: 1,
        allow: Vec::new(),
        forward: Vec::new(),
        env: Vec::new(),
        image: None,
        command: [
            "/bin/sh",
            "-c",
            "cat /proc/sys/kernel/random/boot_id > .oz0-boot-id",
        ]
        .map(String::from)
        .to_vec(),
        data_dir: o.data_dir.clone(),
        boot_timeout: o.timeout,
        monitor_limits: Limits::default(),
    };
    let started = Instant::now();
    let r = crate::vm::run_vm(
        &req,
        crate::vm::VmHost {
            tmp: o.tmp.clone(),
            ..crate::vm::VmHost::on(&host, backend)
        },
        crate::vm::VmIo {
            stdin: oz0_core::Stdio::Null,
            stdout: oz0_core::Stdio::Null,
            stderr: oz0_core::Stdio::Null,
        },
    );
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let kernel = guest_kernel(&work);
    let _ = std::fs::remove_dir_all(&work);
    let mut rep = match r {
        Ok(out) if out.exit_code == 0 && kernel == Kernel::Own => ProbeReport {
            microvm: Microvm {
                ready: true,
                reason: None,
                pinned: None,
                backend: Some(MicrovmBackend::QemuTcgTest),
            },
            detail: format!(
                "the QEMU test backend (software emulation, a test build) booted inside tier 1 in {ms} ms"
            ),
            warning: Some(
                "microVMs are offered through the QEMU test backend: a test build, never a shipped node".into(),
            ),
            boot_ms: None,
        },
        Ok(out) => no(
            MicrovmReason::TestVmDidNotBoot,
            None,
            format!(
                "the QEMU test VM did not boot and answer inside tier 1 ({:?}, status {}, kernel {kernel:?}){}",
                out.ended,
                out.exit_code,
                if out.console_tail.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", out.console_tail.trim())
                }
            ),
        ),
        Err(e) => no(
            MicrovmReason::TestVmDidNotBoot,
            None,
            format!("the QEMU test VM could not start: {e}"),
        ),
    };
    rep.boot_ms = Some(ms);
    rep
}

/// Which kernel the test VM said it runs, against this node's.
#[derive(Debug, PartialEq, Eq)]
enum Kernel {
    /// A kernel of its own: a VM.
    Own,
    /// This node's kernel.
    Node,
    /// It did not say.
    Unsaid,
}

/// Reads the boot id the test VM wrote in its work folder (a regular file,
/// reached without following a link: the guest made it) and compares it
/// with this node's.
fn guest_kernel(work: &Path) -> Kernel {
    use std::io::Read;
    let read = |f: std::fs::File| {
        let mut s = String::new();
        f.take(64)
            .read_to_string(&mut s)
            .ok()
            .map(|_| s.trim().to_string())
    };
    let guest = oz0_linux::hostfs::open_no_links(
        &work.join(".oz0-boot-id"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
    )
    .ok()
    .filter(|fd| {
        rustix::fs::fstat(fd).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        })
    })
    .and_then(|fd| read(std::fs::File::from(fd)))
    .filter(|id| !id.is_empty());
    let node = std::fs::File::open("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(read);
    match (guest, node) {
        (None, _) => Kernel::Unsaid,
        (Some(g), Some(n)) if g == n => Kernel::Node,
        _ => Kernel::Own,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn smolvms_log_reaches_no_terminal_as_controls() {
        assert_eq!(
            plain("\x1b[2m2026\x1b[0m \x1b[33m WARN\x1b[0m x\x07y\x1b]52;c;aGk=\x07"),
            "2026  WARN x\\u{7}y\\u{1b}]52;c;aGk=\\u{7}"
        );
        assert_eq!(plain("plain text"), "plain text");
    }

    use super::*;

    /// Only a boot id of another kernel, in a regular file reached without
    /// a link, counts as a VM's.
    #[test]
    fn the_guest_must_run_a_kernel_of_its_own() {
        let d = std::env::temp_dir().join(format!("oz0-probe-kernel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join(".oz0-boot-id");
        assert_eq!(guest_kernel(&d), Kernel::Unsaid);
        let own = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        std::fs::write(&f, &own).unwrap();
        assert_eq!(guest_kernel(&d), Kernel::Node);
        std::fs::write(&f, "00000000-0000-4000-8000-000000000000\n").unwrap();
        assert_eq!(guest_kernel(&d), Kernel::Own);
        std::fs::remove_file(&f).unwrap();
        std::fs::write(
            d.join("elsewhere"),
            "00000000-0000-4000-8000-000000000000\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), &f).unwrap();
        assert_eq!(guest_kernel(&d), Kernel::Unsaid, "a link is not followed");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn classify() {
        assert_eq!(
            classify_failure("Error: KVM_CREATE_VM failed: EPERM"),
            MicrovmReason::KvmRefused
        );
        assert_eq!(
            classify_failure("agent did not respond"),
            MicrovmReason::TestVmDidNotBoot
        );
    }
}
