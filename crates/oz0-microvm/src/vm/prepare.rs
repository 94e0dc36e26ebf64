//! What a VM's run is made of before it starts, in the order [`run_vm`]
//! makes it: the request checked, the VM's egress, the guest's `/oz0`, the
//! monitor's tier-1 spec and options, and what stops the VM.

use super::*;

/// Checks what `req` asks of `host` before anything is made: a tier-1
/// wall, a command, the variables, the work folder (its real path), the
/// allowlist, the image, and the VMM's pins once more.
pub(super) fn check(
    req: &VmRequest,
    host: &VmHost<'_>,
) -> Result<(PathBuf, oz0_policy::net::Egress), VmError> {
    if host.sandbox.tier() < 1 {
        return Err(VmError::NotTier1(host.sandbox.tier()));
    }
    if req.command.is_empty() {
        return Err(VmError::NoCommand);
    }
    // smolvm's four command lines go to the monitor's script as one list,
    // split at `--oz0--`, each line's words joined by 0x1f: a command (a
    // manifest's, an image's) holding either would add a command line of
    // its own (a `machine create --net`) or drop the `machine delete`.
    if let Some(a) = req
        .command
        .iter()
        .find(|a| *a == crate::backend::PART_MARK || a.contains('\u{1f}'))
    {
        return Err(VmError::Argument(a.clone()));
    }
    for (n, _) in &req.env {
        if let Some(why) = crate::manifest::vm_variable_refusal(n) {
            return Err(VmError::Variable(why));
        }
    }
    // By name, never resolved: the monitor's tier-1 run refuses a work
    // folder that is or passes through a link (one another run may have
    // swapped in for a folder on the way); resolved, it would share the
    // link's target with the guest, writable.
    let work = std::path::absolute(&req.work)
        .map(|p| oz0_policy::path::by_name(&p))
        .map_err(|source| VmError::Work {
            path: req.work.clone(),
            source,
        })?;
    let egress = oz0_policy::net::Egress::parse(&req.allow, &req.forward)?;
    if let (Backend::QemuTcg(g), Some(image)) = (&host.backend, &req.image) {
        g.check_image(image)?;
    }
    if let Backend::Smolvm(v) = &host.backend {
        crate::pin::recheck(v)?;
    }
    Ok((work, egress))
}

/// The VM's proxy run, when it has egress: its lease and token, and its
/// socket, which is outside `vmm/`. The QEMU guest reaches it through the
/// mux; smolvm mounts it into its guest from the monitor's tier-1 run,
/// which gets it as every run with egress does.
pub(super) struct VmEgress {
    pub(super) lease: Option<oz0_egress::Lease>,
    pub(super) token: Option<oz0_egress::Token>,
    pub(super) socket: PathBuf,
}

pub(super) fn open_egress(
    host: &VmHost<'_>,
    vmdir: &VmDir,
    egress: &oz0_policy::net::Egress,
) -> Result<VmEgress, VmError> {
    let mut net = VmEgress {
        lease: None,
        token: None,
        socket: vmdir.dir.join("egress.sock"),
    };
    if egress.is_enabled() {
        let proxy = host.egress.ok_or(VmError::NoProxy)?;
        let t = oz0_egress::Token::generate()?;
        net.lease = Some(proxy.open_socket(oz0_egress::RunEgress {
            run_id: format!("vm-{}", vmdir.id),
            token: t.clone(),
            egress: egress.clone(),
            socket_path: net.socket.clone(),
        })?);
        net.token = Some(t);
    }
    Ok(net)
}

/// The guest's `/oz0`: a folder holding only the node binary (a link when
/// the file system allows, else a copy), read-only for the monitor. QEMU's
/// guest always runs the node's agent; a smolvm guest needs the node only
/// for its egress bridge. Whether the guest has it.
pub(super) fn place_node(
    host: &VmHost<'_>,
    node_dir: &Path,
    egress: bool,
) -> Result<bool, VmError> {
    let guest_node = match &host.backend {
        Backend::QemuTcg(_) => true,
        Backend::Smolvm(_) => egress,
    };
    if guest_node {
        let made = std::fs::create_dir(node_dir).and_then(|_| {
            let dest = node_dir.join(backend::NODE_IN_GUEST);
            let node_exe = host.node_exe;
            std::fs::hard_link(node_exe, &dest)
                .or_else(|_| std::fs::copy(node_exe, &dest).map(|_| ()))
        });
        made.map_err(|source| VmError::Folder {
            tmp: host.tmp.clone(),
            what: "the node binary for the guest",
            source,
        })?;
    }
    Ok(guest_node)
}

/// The monitor's command and what its tier-1 run is given: its
/// environment, the folders it reads, its devices.
pub(super) struct MonitorCommand {
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) read: Vec<String>,
    pub(super) devices: Vec<AbsPath>,
}

/// The folders of the VM a monitor's command names.
pub(super) struct Folders<'a> {
    pub(super) work: &'a Path,
    pub(super) vmm_dir: &'a Path,
    pub(super) node_dir: &'a Path,
    pub(super) guest_node: bool,
}

pub(super) fn monitor_command(
    req: &VmRequest,
    host: &VmHost<'_>,
    f: &Folders<'_>,
    name: String,
    (uid, gid): (u32, u32),
    egress: bool,
) -> Result<MonitorCommand, VmError> {
    let input = MonitorInput {
        work: f.work,
        vmm_dir: f.vmm_dir,
        node_dir: f.node_dir,
        memory_mib: req.memory_mib,
        cpus: req.cpus.max(1),
        image: req.image.as_deref(),
    };
    Ok(match &host.backend {
        Backend::QemuTcg(g) => MonitorCommand {
            argv: backend::qemu_argv(g, &input),
            env: Vec::new(),
            read: vec![utf8(&g.dir)?, utf8(f.node_dir)?],
            devices: Vec::new(),
        },
        Backend::Smolvm(v) => {
            let run = backend::SmolvmRun {
                m: input.clone(),
                name,
                uid,
                gid,
                env_names: req.env.iter().map(|(n, _)| n.as_str()).collect(),
                egress,
                command: &req.command,
                log: None,
                interactive: true,
            };
            let mut read = vec![utf8(&v.dir)?];
            if f.guest_node {
                read.push(utf8(f.node_dir)?);
            }
            MonitorCommand {
                argv: backend::smolvm_argv(v, &run),
                env: backend::smolvm_env(v, f.vmm_dir),
                read,
                devices: vec![AbsPath::new(KVM_DEVICE)?],
            }
        }
    })
}

/// smolvm reads the server's variables, and the token of its egress
/// bridge, from its own environment by name: the values travel in the
/// tier-1 stage's sealed configuration, never on a command line or disk.
pub(super) fn vm_secrets(
    req: &VmRequest,
    backend: &Backend,
    token: Option<&oz0_egress::Token>,
) -> Vec<(String, String)> {
    let mut vm_secrets = Vec::new();
    if let Backend::Smolvm(_) = backend {
        let prefix = oz0_linux::plan::VM_SECRET_PREFIX;
        vm_secrets.extend(
            req.env
                .iter()
                .map(|(n, v)| (format!("{prefix}{n}"), v.clone())),
        );
        if let Some(t) = token {
            vm_secrets.push((
                format!("{prefix}{}", crate::smolguest::TOKEN_VAR),
                t.expose().to_string(),
            ));
        }
    }
    vm_secrets
}

/// The monitor's tier-1 spec: the work folder, what it reads, its own
/// `vmm/` folder writable, its limits.
pub(super) fn monitor_spec(
    req: &VmRequest,
    work: &Path,
    vmm_dir: &Path,
    cmd: MonitorCommand,
) -> Result<(RunSpec, Vec<AbsPath>), VmError> {
    let spec = RunSpec::new(RunRequest {
        work: utf8(work)?,
        read: cmd.read,
        write: vec![utf8(vmm_dir)?],
        env: env_vars(&cmd.env)?,
        allow: Vec::new(),
        forward: Vec::new(),
        limits: monitor_limits(req.memory_mib, &req.monitor_limits),
        // The monitor talks to its guest over unix sockets in its own folder.
        allow_unix_sockets: true,
        data_dir: utf8(&req.data_dir)?,
        command: cmd.argv,
    })?;
    Ok((spec, cmd.devices))
}

/// With `handle_signals`, SIGINT, SIGTERM and SIGHUP write the cancel byte;
/// the flag says whether one came.
pub(super) fn on_signals(handle_signals: bool, cancel_w: &UnixStream) -> Arc<AtomicBool> {
    let signalled = Arc::new(AtomicBool::new(false));
    if handle_signals {
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            let _ = signal_hook::flag::register(sig, signalled.clone());
            if let Ok(w) = cancel_w.try_clone() {
                let _ = signal_hook::low_level::pipe::register(sig, w);
            }
        }
    }
    signalled
}

/// The caller's stop writes the cancel byte; the watcher ends with the
/// VM (when the returned `ended` end is dropped).
pub(super) type Watcher = (Option<UnixStream>, Option<thread::JoinHandle<()>>);

pub(super) fn watch_cancel(
    ext: Option<OwnedFd>,
    cancel_w: &UnixStream,
    tmp: &Path,
) -> Result<Watcher, VmError> {
    let Some(ext) = ext else {
        return Ok((None, None));
    };
    let folder = |source| VmError::Folder {
        tmp: tmp.to_path_buf(),
        what: "the VM's cancel watcher",
        source,
    };
    let (ended_r, ended_w) = UnixStream::pair().map_err(folder)?;
    let w = cancel_w.try_clone().map_err(folder)?;
    let t = thread::spawn(move || {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = [
            PollFd::new(&ext, PollFlags::IN),
            PollFd::new(&ended_r, PollFlags::IN),
        ];
        loop {
            match poll(&mut fds, None) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return,
                Ok(_) => break,
            }
        }
        if !fds[0].revents().is_empty() && fds[1].revents().is_empty() {
            let _ = (&w).write_all(b"x");
        }
    });
    Ok((Some(ended_w), Some(t)))
}

/// The monitor's run options: its cancel, its role (devices, the VMM's
/// seccomp profile, its secrets, smolvm's egress socket) and its stdio.
/// smolvm's server has the monitor's stdio; QEMU's travels over the mux
/// (returned here for the session) and QEMU itself gets no input and
/// writes its own messages where the server's errors go.
pub(super) fn monitor_options(
    backend: &Backend,
    cancel_r: OwnedFd,
    (devices, secrets): (Vec<AbsPath>, Vec<(String, String)>),
    net: &VmEgress,
    io: VmIo,
) -> Result<(RunOptions, Option<RunIo>), VmError> {
    let opts = RunOptions {
        cancel: Some(Cancel(cancel_r)),
        role: Role::Monitor(Monitor {
            devices: devices.iter().map(|d| d.as_str().to_string()).collect(),
            vmm_syscalls: true,
            secrets,
            egress_socket: match backend {
                Backend::Smolvm(_) if net.lease.is_some() => {
                    Some(AbsPath::from_path(&net.socket)?.as_str().to_string())
                }
                _ => None,
            },
        }),
        ..Default::default()
    };
    Ok(match backend {
        Backend::Smolvm(_) => (RunOptions { io, ..opts }, None),
        Backend::QemuTcg(_) => {
            let qemu_err = match &io.stderr {
                Stdio::File(f) => f.try_clone().map_or(Stdio::Null, Stdio::File),
                Stdio::Inherit => Stdio::Inherit,
                Stdio::Null => Stdio::Null,
            };
            let monitor_io = RunIo {
                stdin: Stdio::Null,
                stdout: Stdio::Null,
                stderr: qemu_err,
            };
            (
                RunOptions {
                    io: monitor_io,
                    ..opts
                },
                Some(io),
            )
        }
    })
}
