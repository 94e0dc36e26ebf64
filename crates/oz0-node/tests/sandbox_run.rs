//! Black-box tests of `oz0-node sandbox run`: what a sandboxed process can
//! and cannot do, seen through its own eyes (the probe) and from the host.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::process::{Command, Stdio};

use common::{marker, stderr, stdout, Env, TempDir};

#[test]
fn writes_work_dir_and_write_paths() {
    ready!();
    let env = Env::new("write");
    let extra = env.root.join("extra");
    std::fs::create_dir(&extra).unwrap();
    let extra_s = extra.display().to_string();
    let out = env.sh(
        &["--write", &extra_s],
        &format!("echo one > f && echo two > {extra_s}/g && cat f {extra_s}/g"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "one\ntwo\n");
    assert_eq!(
        std::fs::read_to_string(env.work.join("f")).unwrap(),
        "one\n"
    );
    assert_eq!(std::fs::read_to_string(extra.join("g")).unwrap(), "two\n");
}

#[test]
fn cannot_write_system_host_tmp_or_outside() {
    ready!();
    let env = Env::new("nowrite");
    let outside = TempDir::new("outside");
    let target = outside.join("target");
    std::fs::write(&target, "original").unwrap();
    std::os::unix::fs::symlink(&target, env.work.join("link")).unwrap();
    let host_tmp = format!("/tmp/oz0-host-tmp-{}", marker("tmp"));
    let r = env.probe(
        &[],
        &[
            "--write",
            "/etc/oz0-probe",
            "--write",
            "/usr/oz0-probe",
            "--write",
            "/oz0-probe-root",
            "--write",
            &host_tmp,
            "--write",
            &format!("{}/link", env.work.display()),
            "--write",
            &format!("{}", target.display()),
            "--no-syscalls",
        ],
    );
    let w = &r["write"];
    assert_eq!(w["/etc/oz0-probe"], "EROFS", "{r}");
    assert_eq!(w["/usr/oz0-probe"], "EROFS", "{r}");
    assert_eq!(w["/oz0-probe-root"], "EROFS", "{r}");
    // /tmp inside is the run's own: the write lands there, never on the host.
    assert_eq!(w[&host_tmp], "ok", "{r}");
    assert!(
        !std::path::Path::new(&host_tmp).exists(),
        "host /tmp was written"
    );
    // The link points at a path the run cannot see.
    assert_eq!(w[&format!("{}/link", env.work.display())], "ENOENT", "{r}");
    assert_eq!(w[&format!("{}", target.display())], "ENOENT", "{r}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original");
}

#[test]
fn hard_links_cannot_reach_outside() {
    ready!();
    let env = Env::new("hardlink");
    let outside = TempDir::new("ro");
    std::fs::write(outside.join("ref.txt"), "reference").unwrap();
    let ro = outside.join("ref.txt").display().to_string();
    let w = env.work.display().to_string();
    let r = env.probe(
        &["--read", &ro],
        &[
            "--link",
            &format!("/etc/hostname:{w}/h1"),
            "--link",
            &format!("{ro}:{w}/h2"),
            "--link",
            &format!("/oz0/oz0-node:{w}/h3"),
            "--no-syscalls",
        ],
    );
    for (k, v) in r["link"].as_object().unwrap() {
        assert_eq!(v, "EXDEV", "{k}: {r}");
    }
    assert!(!env.work.join("h1").exists() && !env.work.join("h2").exists());
}

#[test]
fn cannot_read_home_secrets_data_dir_or_node_environment() {
    ready!();
    let env = Env::new("secrets");
    let home = std::env::var("HOME").unwrap_or_else(|_| "/nonexistent".into());
    // A stand-in for ~/.ssh in a home-like folder next to the work dir.
    let fake_home = env.root.join("home");
    std::fs::create_dir_all(fake_home.join(".ssh")).unwrap();
    std::fs::write(fake_home.join(".ssh/id_ed25519"), "PRIVATE-KEY").unwrap();
    let data = env.data.display().to_string();
    let r = {
        let mut args = vec!["/oz0/oz0-node", "sandbox", "probe", "--no-syscalls"];
        let key = format!("{data}/identity/node.key");
        let ssh = format!("{}/.ssh/id_ed25519", fake_home.display());
        let real_ssh = format!("{home}/.ssh");
        let real_key = format!("{home}/.ssh/id_rsa");
        let extra = [
            "--read",
            real_key.as_str(),
            "--read",
            key.as_str(),
            "--list",
            data.as_str(),
            "--read",
            ssh.as_str(),
            "--list",
            real_ssh.as_str(),
            "--list",
            home.as_str(),
            "--read",
            "/proc/1/environ",
            "--read",
            "/etc/shadow",
        ];
        args.extend(extra);
        let out = env
            .cmd(&[], args)
            .env("OZ0_SECRET_TOKEN", "tok-should-not-leak")
            .env("AWS_SECRET_ACCESS_KEY", "aws-should-not-leak")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(
        r["read"][format!("{data}/identity/node.key")],
        "ENOENT",
        "{r}"
    );
    assert_eq!(r["list"][data.as_str()], "ENOENT", "{r}");
    assert_eq!(
        r["read"][format!("{}/.ssh/id_ed25519", fake_home.display())],
        "ENOENT",
        "{r}"
    );
    // The node user's own secrets answer as refused, so that a run reading
    // one learns it was refused rather than that nothing is there; the
    // home itself is not listed.
    let refused = if home == "/nonexistent" {
        "ENOENT"
    } else {
        "EACCES"
    };
    assert_eq!(r["list"][format!("{home}/.ssh")], refused, "{r}");
    assert_eq!(r["read"][format!("{home}/.ssh/id_rsa")], refused, "{r}");
    assert_eq!(r["list"][home.as_str()], refused, "{r}");
    // The run is told its wall, and reads what it may do in its policy file.
    let told = env.sh(
        &[],
        "echo \"$OZ0_SANDBOX\"; cat \"${OZ0_SANDBOX##*policy=}\"",
    );
    let text = stdout(&told);
    let (var, policy) = text.split_once('\n').unwrap();
    assert_eq!(var, "tier=1;wall=bubblewrap;policy=/tmp/.oz0-sandbox.json");
    let policy: serde_json::Value = serde_json::from_str(policy).unwrap();
    assert_eq!(policy["tier"], 1, "{policy}");
    assert_eq!(policy["network"], serde_json::json!(["none"]), "{policy}");
    assert_eq!(
        policy["write"][0],
        env.work.display().to_string(),
        "{policy}"
    );
    if refused == "EACCES" {
        assert!(
            policy["refused"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(format!("{home}/.ssh"))),
            "{policy}"
        );
    }
    assert_ne!(r["read"]["/etc/shadow"], "ok", "{r}");
    // bubblewrap's pid 1: unreadable under Landlock; and never holding secrets.
    let pid1 = env.sh(
        &[],
        "cat /proc/1/environ /proc/1/cmdline 2>/dev/null | tr '\\0' ' '",
    );
    let text = stdout(&pid1);
    assert!(!text.contains("should-not-leak"), "{text}");
}

#[test]
fn bubblewrap_pid1_carries_no_secret() {
    ready!();
    let env = Env::new("pid1");
    // Whether or not /proc/1 is readable, its command line names no path,
    // variable or value of the run.
    let secret_dir = env.root.join("secret-named-dir");
    std::fs::create_dir(&secret_dir).unwrap();
    let out = env
        .cmd(
            &["--read", &secret_dir.display().to_string(), "--env", "API_TOKEN=sk-live-123"],
            ["/bin/sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/1/environ | tr '\\0' ' '; echo END"],
        )
        .env("NODE_SECRET", "node-secret-value")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("END"), "{}", stderr(&out));
    for s in [
        "sk-live-123",
        "node-secret-value",
        "secret-named-dir",
        "API_TOKEN",
    ] {
        assert!(!text.contains(s), "{s} visible via /proc/1: {text}");
    }
}

#[test]
fn environment_is_exactly_what_was_given() {
    ready!();
    let env = Env::new("env");
    let envfile = env.root.join("env.list");
    std::fs::write(&envfile, "# comment\nFROM_FILE=f v\n\n").unwrap();
    let out = env
        .cmd(
            &[
                "--env",
                "GIVEN=yes",
                "--env",
                "PASSED",
                "--env-file",
                &envfile.display().to_string(),
            ],
            ["/usr/bin/env"],
        )
        .env("PASSED", "through")
        .env("OZ0_NODE_SETTING", "x")
        .env("NOT_GIVEN", "no")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut lines: Vec<String> = stdout(&out).lines().map(String::from).collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "FROM_FILE=f v",
            "GIVEN=yes",
            "HOME=/tmp",
            "OZ0_SANDBOX=tier=1;wall=bubblewrap;policy=/tmp/.oz0-sandbox.json",
            "PASSED=through",
            "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "TMPDIR=/tmp",
        ]
    );
    // A line that is no NAME=VALUE (a PEM's second line) refuses the run
    // without being shown.
    std::fs::write(
        &envfile,
        "KEY=-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n",
    )
    .unwrap();
    let status = env.root.join("status.json");
    let out = env
        .cmd(
            &[
                "--env-file",
                &envfile.display().to_string(),
                "--json-status",
                &status.display().to_string(),
            ],
            ["/bin/true"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));
    let doc = std::fs::read_to_string(&status).unwrap_or_default();
    for seen in [stderr(&out), doc] {
        assert!(!seen.contains("MIIEvQ"), "{seen}");
    }
}

#[test]
fn node_variables_and_sandbox_variables_are_refused() {
    ready!();
    let env = Env::new("envrefuse");
    let marker_file = env.work.join("ran");
    for bad in [
        "OZ0_TOKEN=1",
        "HOME=/root",
        "HTTP_PROXY=x",
        "1BAD=x",
        "UNSET_VARIABLE_X",
    ] {
        let out = env.sh(&["--env", bad], &format!("touch {}", marker_file.display()));
        assert_eq!(out.status.code(), Some(125), "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("sandbox refused"),
            "{bad}: {}",
            stderr(&out)
        );
        assert!(!marker_file.exists(), "{bad}: the command ran");
    }
}

#[test]
fn syscalls_are_refused_with_the_expected_errno() {
    ready!();
    let env = Env::new("syscalls");
    let r = env.probe(&[], &[]);
    let s = &r["syscalls"];
    let want = [
        ("ptrace", "EPERM"),
        ("process_vm_readv", "EPERM"),
        ("mount", "EPERM"),
        ("io_uring_setup", "EPERM"),
        ("bpf", "EPERM"),
        ("perf_event_open", "EPERM"),
        ("keyctl", "EPERM"),
        ("add_key", "EPERM"),
        ("userfaultfd", "EPERM"),
        ("kexec_load", "EPERM"),
        ("init_module", "EPERM"),
        ("tiocsti", "EPERM"),
        // The command's stdin is no terminal: unfiltered, ENOTTY.
        ("tiocsetd", "EPERM"),
        // Unfiltered, EFAULT on this kernel; ENOSYS sends tools to
        // /proc/self/mountinfo.
        ("statmount", "ENOSYS"),
        ("listmount", "ENOSYS"),
        ("quotactl_fd", "EPERM"),
        ("socket_netlink", "EAFNOSUPPORT"),
        ("socket_vsock", "EAFNOSUPPORT"),
        ("socket_packet", "EAFNOSUPPORT"),
        ("unshare_user", "EPERM"),
        ("unshare_mount_ns", "EPERM"),
        ("socket_unix", "EPERM"),
        ("socket_inet", "ok"),
    ];
    for (k, v) in want {
        assert_eq!(s[k], v, "{k}: {r}");
    }
    if cfg!(target_arch = "x86_64") {
        assert_eq!(s["x32_getpid"], "ENOSYS", "{r}");
    }
    // No capability in any set: the stage had two (to mount placeholders)
    // and gave them up, bounding and ambient sets included.
    for set in ["cap_eff", "cap_prm", "cap_inh", "cap_bnd", "cap_amb"] {
        assert_eq!(r[set], "0000000000000000", "{set}: {r}");
    }
    assert_eq!(r["no_new_privs"], "1", "{r}");
    assert_eq!(r["seccomp"], "2", "{r}");
    // The command inherits stdin, stdout, stderr — and the probe's own /proc read.
    let fds: Vec<String> = serde_json::from_value(r["open_fds"].clone()).unwrap();
    assert!(fds.len() <= 4, "unexpected descriptors: {fds:?}");
}

#[test]
fn unix_sockets_only_when_allowed() {
    ready!();
    let env = Env::new("unix");
    // Socket pairs always work; new unix sockets only with --allow-unix-sockets.
    let script = "python3 -c 'import socket; socket.socketpair(); print(\"pair ok\")'; \
                  python3 -c 'import socket; socket.socket(socket.AF_UNIX); print(\"socket ok\")' 2>/dev/null; true";
    let out = env.sh(&[], script);
    assert!(
        stdout(&out).contains("pair ok"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    assert!(!stdout(&out).contains("socket ok"), "{}", stdout(&out));
    let out = env.sh(&["--allow-unix-sockets"], script);
    assert!(
        stdout(&out).contains("socket ok"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn nested_user_namespace_is_refused_even_by_unshare_command() {
    ready!();
    let env = Env::new("unshare");
    let out = env.sh(&[], "unshare -U true; echo rc=$?");
    assert!(
        stdout(&out).contains("rc=1"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
}

/// The run's `/dev` is its own: the usual device nodes (usable), links,
/// an empty `shm` and a new devpts instance. The host's `/dev`, which the
/// stage builds it from, is gone before the command starts: no mount of it
/// is left anywhere in the run's namespace, and nothing of the host's
/// `/dev/shm` is visible.
#[test]
fn dev_is_the_runs_own_and_the_hosts_is_gone() {
    ready!();
    let env = Env::new("dev");
    let marker = format!("oz0-host-marker-{}", std::process::id());
    // Where the host has a /dev/shm this user can write, leave a mark there.
    let host_shm = std::path::Path::new("/dev/shm").join(&marker);
    let marked = std::fs::write(&host_shm, "host").is_ok();
    let out = env.sh(
        &[],
        "echo \"dev: $(ls -A /dev | tr '\\n' ' ')\"; \
         echo \"pts: $(ls -A /dev/pts | tr '\\n' ' ')\"; \
         echo \"shm: $(ls -A /dev/shm | tr '\\n' ' ')\"; \
         echo x > /dev/null && echo null=ok; \
         echo \"urandom=$(head -c 16 /dev/urandom | wc -c)\"; \
         echo \"zero=$(head -c 16 /dev/zero | wc -c)\"; \
         echo x > /dev/shm/f && echo shm=writable; \
         test -e /oz0/dev && echo oz0dev=present; \
         sed -n 's/^[0-9]* [0-9]* [^ ]* [^ ]* \\([^ ]*\\) .* - \\([^ ]*\\) .*/mount \\2 \\1/p' /proc/self/mountinfo",
    );
    let _ = std::fs::remove_file(&host_shm);
    let text = stdout(&out);
    assert!(out.status.success(), "{text} {}", stderr(&out));
    let line = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_default()
            .to_string()
    };
    let dev_line = line("dev: ");
    let mut dev: Vec<&str> = dev_line.split_whitespace().collect();
    dev.sort();
    assert_eq!(
        dev,
        [
            "core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
            "stdout", "tty", "urandom", "zero"
        ],
        "{text}"
    );
    assert_eq!(line("pts: ").trim(), "ptmx", "{text}");
    assert_eq!(line("shm: ").trim(), "", "host /dev/shm visible: {text}");
    for want in ["null=ok", "urandom=16", "zero=16", "shm=writable"] {
        assert!(text.lines().any(|l| l == want), "{want}: {text}");
    }
    assert!(!text.contains("oz0dev=present"), "{text}");
    assert!(!text.contains(&marker), "{text}");
    // Mounts of the host's devtmpfs: exactly the six nodes, nothing else
    // (not the host's /dev, /dev/shm or /dev/pts).
    let mounts: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("mount "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let mut devtmpfs: Vec<&str> = mounts
        .iter()
        .filter(|(fs, _)| *fs == "devtmpfs")
        .map(|(_, at)| *at)
        .collect();
    devtmpfs.sort();
    assert_eq!(
        devtmpfs,
        [
            "/dev/full",
            "/dev/null",
            "/dev/random",
            "/dev/tty",
            "/dev/urandom",
            "/dev/zero"
        ],
        "{text}"
    );
    assert!(
        mounts.iter().all(|(_, at)| !at.starts_with("/oz0/dev")),
        "{text}"
    );
    assert_eq!(
        mounts.iter().filter(|(fs, _)| *fs == "devpts").count(),
        1,
        "{text}"
    );
    if !marked {
        eprintln!("note: no writable host /dev/shm here; its marker was not placed");
    }
}

/// On a terminal, the run's `/dev/console` is that very terminal, so that
/// `tty` (glibc's `ttyname`) names it, as under bubblewrap's `--dev`.
#[test]
fn a_terminal_is_the_runs_console() {
    ready!();
    let env = Env::new("console");
    if !std::path::Path::new("/usr/bin/script").exists() {
        assert!(
            std::env::var_os("OZ0_MUST_WORK").is_none(),
            "script(1) (util-linux) is needed for a terminal"
        );
        eprintln!("skipped: no script(1) to give the run a terminal");
        return;
    }
    let run = env.cmd(
        &[],
        [
            "/bin/sh",
            "-c",
            "tty; test -c /dev/console && echo console=chr",
        ],
    );
    let line: Vec<String> = std::iter::once(run.get_program())
        .chain(run.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy()))
        .collect();
    let out = Command::new("/usr/bin/script")
        .args(["-qec", &line.join(" "), "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("/dev/console"), "{text} {}", stderr(&out));
    assert!(text.contains("console=chr"), "{text}");
    // Without a terminal there is no console.
    let out = env.sh(
        &[],
        "test -e /dev/console && echo console=present; echo done",
    );
    assert_eq!(stdout(&out).trim(), "done", "{}", stderr(&out));
}

#[test]
fn network_is_loopback_only() {
    ready!();
    let env = Env::new("net");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let host_target = format!("127.0.0.1:{port}");
    let r = env.probe(&[], &["--connect", &host_target, "--no-syscalls"]);
    assert_eq!(r["connect"][&host_target], "ECONNREFUSED", "{r}");
    let out = env.sh(
        &[],
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
    );
    assert_eq!(stdout(&out).trim(), "lo", "{}", stderr(&out));
}

#[test]
fn git_works_but_hooks_config_and_rename_are_protected() {
    ready!();
    if !std::path::Path::new("/usr/bin/git").exists()
        && !std::path::Path::new("/usr/local/bin/git").exists()
    {
        common::skip("git is not installed");
        return;
    }
    let env = Env::new("git");
    let g = "git -c user.name=t -c user.email=t@example.invalid";
    // git init inside works (no .git yet: the run's own repository), and
    // `git add -A` takes none of the placeholder files (.bashrc, .envrc,
    // ...): the run's git excludes them.
    let out = env.sh(
        &[],
        &format!(
            "git init -q . && echo a > a && git add -A && {g} commit -qm one && echo ok; \
             git ls-files | tr '\\n' ' '; echo; git status --porcelain | wc -l"
        ),
    );
    let text = stdout(&out);
    assert!(text.contains("ok"), "{text} {}", stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[1].trim(), "a", "committed: {text}");
    assert_eq!(
        lines[2].trim(),
        "0",
        "git status shows placeholders: {text}"
    );
    // Now .git exists: a second run may commit, but not touch hooks/config or move .git.
    std::fs::write(
        env.work.join(".git/hooks/pre-commit"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    // The host's own hook, written before the run: a change in the very
    // tick of the file-change clock in which a run starts would count as
    // the run's (see gitlook), so it is written a tick before.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let script = format!(
        "echo b > b && git add b && {g} commit -qm two && echo commit=ok; \
         echo 'echo pwned' > .git/hooks/pre-commit && echo hook=written; \
         echo x > .git/hooks/post-checkout && echo newhook=written; \
         echo '[core]' >> .git/config && echo config=written; \
         git config core.hooksPath /tmp && echo hookspath=written; \
         mv .git .git-aside && echo rename=done; \
         rm -rf .git 2>/dev/null; test -d .git && echo git=still-there; \
         mkdir .claude/x 2>/dev/null && echo claude=written; \
         echo '{{}}' > .mcp.json && echo mcp=written; \
         echo alias > .bashrc && echo bashrc=written; \
         mv .codex codex-aside 2>/dev/null && echo placeholder-moved; \
         rmdir .vscode 2>/dev/null && echo placeholder-removed; \
         umount .idea 2>/dev/null && echo placeholder-unmounted; \
         test -d .codex && echo codex=held; true"
    );
    let out = env.sh(&[], &script);
    let text = stdout(&out);
    assert!(text.contains("commit=ok"), "{text} {}", stderr(&out));
    for bad in [
        "hook=written",
        "newhook=written",
        "config=written",
        "hookspath=written",
        "rename=done",
        "claude=written",
        "mcp=written",
        "bashrc=written",
        "placeholder-moved",
        "placeholder-removed",
        "placeholder-unmounted",
    ] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
    assert!(text.contains("codex=held"), "{text}");
    assert!(text.contains("git=still-there"), "{text}");
    assert_eq!(
        std::fs::read_to_string(env.work.join(".git/hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!std::fs::read_to_string(env.work.join(".git/config"))
        .unwrap()
        .contains("hooksPath"));
    // Placeholders for missing names are gone after the run.
    for n in [
        ".claude",
        ".mcp.json",
        ".bashrc",
        ".vscode",
        ".codex",
        ".idea",
    ] {
        assert!(!env.work.join(n).exists(), "{n} left behind");
    }
    assert!(!env.work.join(".git/hooks/post-checkout").exists());
}

/// The run's pid 1 is the stage, in the one mount namespace that holds the
/// placeholders, and undumpable: no process of the run can reach another
/// namespace through `/proc/1/root` (which only Landlock would stop when
/// pid 1 lived elsewhere) and write a protected name there.
#[test]
fn pid_1_is_the_stage_and_proc_1_root_reaches_no_protected_name() {
    ready!();
    let env = Env::new("pid1root");
    let w = env.work.display();
    let script = format!(
        "tr '\\0' ' ' < /proc/1/cmdline; echo; \
         echo x > /proc/1/root{w}/.bashrc 2>/dev/null && echo root-bashrc=written; \
         mkdir /proc/1/root{w}/.claude/x 2>/dev/null && echo root-claude=written; \
         ls /proc/1/root/ >/dev/null 2>&1 && echo root=listed; \
         cat /proc/1/environ >/dev/null 2>&1 && echo environ=read; echo END"
    );
    let out = env.sh(&[], &script);
    let text = stdout(&out);
    assert!(text.contains("END"), "{text} {}", stderr(&out));
    assert!(
        text.starts_with("/oz0/oz0-node __oz0-stage "),
        "pid 1 is not the stage: {text}"
    );
    for bad in [
        "root-bashrc=written",
        "root-claude=written",
        "root=listed",
        "environ=read",
    ] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
    assert!(
        !env.work.join(".bashrc").exists(),
        "a protected name was left written"
    );
}

#[test]
fn existing_settings_folders_stay_read_only() {
    ready!();
    let env = Env::new("settings");
    std::fs::create_dir(env.work.join(".claude")).unwrap();
    std::fs::write(env.work.join(".claude/settings.json"), "{}").unwrap();
    let out = env.sh(
        &[],
        "echo evil > .claude/settings.json; echo rc=$?; mv .claude c2; echo mv=$?",
    );
    let text = stdout(&out);
    assert!(text.contains("rc=1") || text.contains("rc=2"), "{text}");
    assert!(!text.contains("mv=0"), "{text}");
    assert_eq!(
        std::fs::read_to_string(env.work.join(".claude/settings.json")).unwrap(),
        "{}"
    );
}

#[test]
fn protected_symlink_refuses_the_run() {
    ready!();
    let env = Env::new("protlink");
    std::os::unix::fs::symlink("/etc", env.work.join(".vscode")).unwrap();
    let out = env.sh(&[], "touch ran");
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains(".vscode"), "{}", stderr(&out));
    assert!(!env.work.join("ran").exists());
}
