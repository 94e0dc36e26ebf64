//! `oz0-node sandbox run --image`: a command in an image's root, inside the
//! same tier-1 wall as every run, against a real registry on loopback
//! (Debian's `docker-registry`) and an image this test builds from Debian's
//! static busybox. The run sees the image's files and none of the host's
//! system, its work folder at /work, the image's command, variables and
//! working folder; the image cannot be written; the wall's properties
//! (seccomp, no capabilities, no new privileges) hold inside it.
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::Path;
use std::process::Output;

use common::oci::{has_runsc, tar, Registry};
use common::{stderr, stdout, Env};

/// Debian's static busybox (package busybox-static).
const BUSYBOX: &str = "/bin/busybox";

/// An image of busybox with `sh` and `ls`, a `/srv/hello.txt`, and `run`
/// as its config, pushed as `name`; its reference.
fn busybox_image(reg: &Registry, name: &str, run: &str) -> Option<String> {
    busybox_image_with(reg, name, run, &[])
}

/// [`busybox_image`] with `more` entries in its layer.
fn busybox_image_with(
    reg: &Registry,
    name: &str,
    run: &str,
    more: &[(&str, u8, u32, &[u8])],
) -> Option<String> {
    let Ok(bb) = std::fs::read(BUSYBOX) else {
        common::skip("no static busybox at /bin/busybox (apt-get install busybox-static)");
        return None;
    };
    let mut entries: Vec<(&str, u8, u32, &[u8])> = vec![
        ("bin/", b'5', 0o755, b""),
        ("bin/busybox", b'0', 0o755, &bb),
        ("bin/sh", b'2', 0o777, b"busybox"),
        ("srv/", b'5', 0o755, b""),
        ("srv/hello.txt", b'0', 0o644, b"hello from the image\n"),
        // What the run's own mounts take: never bound from the image.
        ("tmp/", b'5', 0o755, b""),
        ("tmp/image-tmp", b'0', 0o644, b"x"),
    ];
    entries.extend_from_slice(more);
    let layer = tar(&entries);
    let digest = reg.push_with(name, &[layer], None, run);
    Some(format!("oci:{}/{name}@{digest}", reg.host()))
}

/// `sandbox run --image IMAGE` with the registry allowed, then `cmd`.
fn run_image(env: &Env, reg: &Registry, image: &str, extra: &[&str], cmd: &[&str]) -> Output {
    let host = reg.host();
    let mut args = vec!["--image", image, "--oci-registry", &host];
    args.extend_from_slice(extra);
    env.cmd(&args, cmd).output().unwrap()
}

const SCRIPT: &str = "echo pwd=$(pwd); echo greeting=$GREETING; echo home=$HOME; \
echo ids=$(id -u):$(id -g); echo owner=$(stat -c %u /srv/hello.txt); \
cat /srv/hello.txt; for n in bin srv work tmp oz0 usr etc lib lib64 home root var; do \
test -e /$n && echo has-$n; done; \
test -e /etc/passwd && echo host-etc-visible; test -e /tmp/image-tmp && echo image-tmp-bound; \
echo made > /work/out.txt; (echo x > /srv/new) 2>/dev/null && echo image-writable; \
(echo x > /new) 2>/dev/null && echo root-writable; echo done";

fn config(cmd: &str) -> String {
    let cmd = serde_json::to_string(cmd).unwrap();
    format!(
        r#"{{"Entrypoint":["/bin/sh","-c"],"Cmd":[{cmd}],"Env":["PATH=/bin","GREETING=hi","HOME=/root"],"WorkingDir":"/srv","User":"1000"}}"#
    )
}

#[test]
fn an_image_runs_its_own_command_in_its_root_with_work_at_slash_work() {
    ready!();
    let Some(reg) = Registry::start() else { return };
    let Some(image) = busybox_image(&reg, "acme/busybox", &config(SCRIPT)) else {
        return;
    };
    let env = Env::new("oci-run");
    let out = run_image(&env, &reg, &image, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "pwd=/srv\n",
        "greeting=hi\n",
        "home=/tmp\n",
        "hello from the image\n",
        // The image's User (1000, no /etc/passwd: group 0), who owns the
        // image's files there: the node's user mapped to it.
        "ids=1000:0\n",
        "owner=1000\n",
        "done\n",
    ] {
        assert!(text.contains(want), "{want:?} missing: {text}");
    }
    for never in [
        "host-etc-visible",
        "image-tmp-bound",
        "image-writable",
        "root-writable",
    ] {
        assert!(!text.contains(never), "{never}: {text}");
    }
    // At the top: the image's names and the run's own mounts, nothing of
    // the host's system (the root itself cannot be listed: Landlock).
    let has: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("has-"))
        .collect();
    assert_eq!(has, ["bin", "srv", "work", "tmp", "oz0"], "{text}");
    assert_eq!(
        std::fs::read_to_string(env.work.join("out.txt")).unwrap(),
        "made\n"
    );
    // The image's HOME is the sandbox's to set, and says so.
    assert!(
        stderr(&out).contains("\"HOME\" is not passed"),
        "{}",
        stderr(&out)
    );
    // The cached image is as it was pulled.
    let images = env.data.join("oci/images");
    let one = std::fs::read_dir(&images).unwrap().next().unwrap().unwrap();
    let rootfs = one.path().join("rootfs");
    assert!(rootfs.join("srv/hello.txt").exists());
    assert!(!rootfs.join("srv/new").exists());
    assert!(!rootfs.join("new").exists());
    assert!(!Path::new(&rootfs).join("work").exists());

    // Arguments after -- take the cmd's place after the entrypoint.
    let out = run_image(&env, &reg, &image, &[], &["echo given; pwd"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "given\n/srv\n");
}

#[test]
fn the_wall_holds_inside_an_image_root() {
    ready!();
    let Some(reg) = Registry::start() else { return };
    // busybox's own applets, nothing of the node's: what the kernel says
    // of the command's process, a new user namespace, the registry's port.
    let script = format!(
        "grep -E '^(CapEff|CapPrm|CapInh|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
         unshare -U true 2>/dev/null && echo unshare-ok; \
         echo | nc -w 2 127.0.0.1 {} 2>/dev/null && echo connect-ok; \
         ls /oz0; echo end",
        reg.host().rsplit(':').next().unwrap()
    );
    let Some(image) = busybox_image(&reg, "acme/wall", &config(&script)) else {
        return;
    };
    let env = Env::new("oci-wall");
    let out = run_image(&env, &reg, &image, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for set in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert!(
            text.contains(&format!("{set}:\t0000000000000000\n")),
            "{set}: {text}"
        );
    }
    assert!(text.contains("NoNewPrivs:\t1\n"), "{text}");
    assert!(text.contains("Seccomp:\t2\n"), "{text}");
    assert!(
        !text.contains("unshare-ok"),
        "a user namespace was made: {text}"
    );
    assert!(
        !text.contains("connect-ok"),
        "the registry was reachable: {text}"
    );
    assert!(text.ends_with("end\n"), "{text}");
}

#[test]
fn what_an_image_run_refuses() {
    ready!();
    let Some(reg) = Registry::start() else { return };
    let Some(image) = busybox_image(&reg, "acme/refused", &config("true")) else {
        return;
    };
    let env = Env::new("oci-refused");
    let extra = env.root.join("extra");
    std::fs::create_dir(&extra).unwrap();
    let extra = extra.display().to_string();
    let cases: Vec<(Vec<&str>, String, &str)> = vec![
        // No host folder besides the work folder.
        (
            vec!["--read", &extra],
            image.clone(),
            "no other host folder",
        ),
        // A tag instead of a digest.
        (
            vec![],
            format!("oci:{}/acme/refused:v1", reg.host()),
            "digest",
        ),
        // A registry the node was not told it may use.
        (
            vec![],
            image.replace("127.0.0.1", "localhost"),
            "--oci-registry",
        ),
    ];
    for (extra, image, want) in cases {
        let out = run_image(&env, &reg, &image, &extra, &[]);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{image} {extra:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(want), "{want:?}: {}", stderr(&out));
    }
    // A working folder in the host's /dev while the run's is built (bound
    // at /oz0/dev, then taken away), named or through a link in the image:
    // refused, nothing of the image's command runs.
    let at = |dir: &str| {
        format!(
            r#"{{"Entrypoint":["/bin/sh","-c"],"Cmd":["echo ran; pwd; ls"],"Env":["PATH=/bin"],"WorkingDir":"{dir}"}}"#
        )
    };
    let named = busybox_image(&reg, "acme/in-oz0", &at("/oz0/dev/shm")).unwrap();
    let linked = busybox_image_with(
        &reg,
        "acme/via-link",
        &at("/devs"),
        &[("devs", b'2', 0o777, b"/oz0/dev/pts")],
    )
    .unwrap();
    for (image, want) in [
        (named, "is under /oz0"),
        (linked, "not in the run's file tree"),
    ] {
        let out = run_image(&env, &reg, &image, &[], &[]);
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(stderr(&out).contains(want), "{want:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains("ran"), "{}", stdout(&out));
    }
    // The plan shows the work folder at /work and the image's names.
    let out = run_image(&env, &reg, &image, &["--dry-run"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let args: Vec<String> = serde_json::from_value(plan["bwrap_args"].clone()).unwrap();
    let args = args.join(" ");
    assert!(
        args.contains(&format!("--bind {} /work", env.work.display())),
        "{args}"
    );
    assert!(args.contains("/rootfs/srv /srv"), "{args}");
    assert!(!args.contains("--ro-bind /usr /usr"), "{args}");
    assert_eq!(plan["cwd"], "/srv");
}

/// The node proves runs in an image's root at its start before it offers
/// runtime.oci: the eight-property self-test again, every run in an image
/// it makes (a static busybox for the checks' shell, the node's witness),
/// with the image's own judgements after the files check; each can fail
/// (a property's fault; no image's root at all).
#[test]
fn the_node_checks_runs_in_an_image_root_before_it_offers_them() {
    ready!();
    let dir = common::TempDir::new("oci-check");
    let run = |fault: Option<&str>| {
        let data = dir.join(&format!("data-{}", fault.unwrap_or("none")));
        let mut c = std::process::Command::new(common::node());
        c.args(["--no-config", "run", "--once", "--data-dir"])
            .arg(&data)
            // Never reached: the check needs no registry.
            .args(["--oci-registry", "127.0.0.1:9"])
            .env("OZ0_MICROVM", "off");
        if let Some(f) = fault {
            c.args(["--inject-image-fault", f]);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let facts = std::process::Command::new(common::node())
            .args(["--no-config", "facts", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        let facts: serde_json::Value = serde_json::from_slice(&facts.stdout).unwrap();
        (stderr(&out), facts)
    };
    let (log, facts) = run(None);
    assert!(
        log.contains("runs in an image's root: the self-test passed (8 checks"),
        "{log}"
    );
    for p in oz0_policy::facts::Property::ALL.map(|p| p.as_str()) {
        assert!(
            log.contains(&format!("In an image's root: Self-test {p}: ok")),
            "{p}: {log}"
        );
    }
    assert!(
        log.contains("the image's files read-only, nothing of the host's system"),
        "{log}"
    );
    assert_eq!(facts["oci"]["ready"], true, "{facts}");
    assert_eq!(facts["oci"]["runtimes"][0], "tier1", "{facts}");
    // gVisor too, where runsc is installed (CI installs it): its own
    // check, a copy of the witness in its image.
    if has_runsc() {
        assert!(
            log.contains("gVisor (") && log.contains("): checked:"),
            "{log}"
        );
        assert_eq!(facts["oci"]["runtimes"][1], "gvisor", "{facts}");
    } else {
        common::skip("runsc (gVisor) is not installed: the gVisor half is not shown");
    }
    assert_eq!(facts["labels"]["runtime.oci"], "ready", "{facts}");
    for (fault, saw) in [
        ("files", "the self-test failed at files"),
        ("egress", "the self-test failed at egress"),
        ("no-image", "the host's /etc/passwd could be read"),
    ] {
        let (log, facts) = run(Some(fault));
        assert!(log.contains(saw), "{fault}: {log}");
        assert_eq!(facts["oci"]["ready"], false, "{facts}");
        assert_eq!(facts["oci"]["reason"], "image_check_failed", "{facts}");
        assert_eq!(facts["labels"]["runtime.oci"], "unavailable", "{facts}");
    }
}

/// `--oci-runtime gvisor`: the same image behind gVisor's own kernel, with
/// no network at all; what it cannot enforce is refused.
#[test]
fn gvisor_runs_the_image_behind_a_kernel_of_its_own() {
    ready!();
    if !has_runsc() {
        common::skip("runsc (gVisor) is not installed (apt-get install runsc)");
        return;
    }
    let Some(reg) = Registry::start() else { return };
    let script = format!(
        "cat /proc/version; cat /srv/hello.txt; echo greeting=$GREETING; echo pwd=$(pwd); \\
         test -e /etc/passwd && echo host-etc-visible; echo made > /work/out.txt; \\
         (echo x > /srv/new) 2>/dev/null && echo image-writable; \\
         grep -E '^CapEff:' /proc/self/status; echo told=$OZ0_SANDBOX; \\
         grep -c '\"wall\": \"gvisor\"' /tmp/.oz0-sandbox.json; \\
         (echo x > /tmp/.oz0-sandbox.json) 2>/dev/null && echo policy-writable; \\
         echo | nc -w 2 127.0.0.1 {} 2>/dev/null && echo connect-ok; echo end",
        reg.host().rsplit(':').next().unwrap()
    );
    let Some(image) = busybox_image(&reg, "acme/gvisor", &config(&script)) else {
        return;
    };
    let env = Env::new("oci-gvisor");
    let out = run_image(&env, &reg, &image, &["--oci-runtime", "gvisor"], &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    // gVisor's kernel answers, not this machine's.
    let host_version = std::fs::read_to_string("/proc/version").unwrap();
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("Linux version") && !host_version.starts_with(first),
        "{text}"
    );
    for want in [
        "hello from the image\n",
        "greeting=hi\n",
        "pwd=/srv\n",
        "CapEff:\t0000000000000000\n",
        // It is told its wall, and reads its policy file (read-only).
        "told=tier=1;wall=gvisor;policy=/tmp/.oz0-sandbox.json\n1\n",
        "end\n",
    ] {
        assert!(text.contains(want), "{want:?}: {text}");
    }
    for never in [
        "host-etc-visible",
        "image-writable",
        "connect-ok",
        "policy-writable",
    ] {
        assert!(!text.contains(never), "{never}: {text}");
    }
    assert_eq!(
        std::fs::read_to_string(env.work.join("out.txt")).unwrap(),
        "made\n"
    );
    // What the run left for host git is looked at after it, as after
    // every tier-1 run: a hook is renamed aside, with a warning.
    let out = run_image(
        &env,
        &reg,
        &image,
        &["--oci-runtime", "gvisor"],
        &["mkdir -p /work/repo/.git/hooks && echo evil > /work/repo/.git/hooks/pre-commit"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !env.work.join("repo/.git/hooks/pre-commit").exists(),
        "the hook is still where git runs it: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("warning:"), "{}", stderr(&out));
    // The command's own status comes back.
    let out = run_image(
        &env,
        &reg,
        &image,
        &["--oci-runtime", "gvisor"],
        &["exit 7"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    // What gVisor cannot give here is refused, never dropped.
    for extra in [
        &["--oci-runtime", "gvisor", "--allow", "example.com"][..],
        &["--oci-runtime", "gvisor", "--cpu-seconds", "5"][..],
    ] {
        let out = run_image(&env, &reg, &image, extra, &[]);
        assert_eq!(out.status.code(), Some(125), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("never dropped"), "{}", stderr(&out));
    }
    // A work folder reached through a link is refused, as in tier 1: the
    // run would write where the link leads, and the look after it would
    // hold nothing.
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = env.root.join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let out = std::process::Command::new(common::node())
        .args(["sandbox", "run", "--work"])
        .arg(&link)
        .arg("--data-dir")
        .arg(&env.data)
        .args(["--image", &image, "--oci-registry", &reg.host()])
        .args([
            "--oci-runtime",
            "gvisor",
            "--",
            "echo x > /work/through-link",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert!(!elsewhere.join("through-link").exists());
    // The timeout ends the sandbox.
    let started = std::time::Instant::now();
    let out = run_image(
        &env,
        &reg,
        &image,
        &["--oci-runtime", "gvisor", "--timeout", "2"],
        &["sleep 60"],
    );
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(started.elapsed().as_secs() < 30);
}

/// `sandbox run --work W` (tier 1, the host's system) with `cmd`.
fn tier1_run(env: &Env, work: &Path, cmd: &str) -> std::process::Command {
    let mut c = std::process::Command::new(common::node());
    c.args(["sandbox", "run", "--work"])
        .arg(work)
        .arg("--data-dir")
        .arg(&env.data)
        .args(["--", "sh", "-c", cmd])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// Waits up to 20 s for `path` to exist.
fn wait_for(path: &Path) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < until,
            "{} never came",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// runsc binds the work folder by its path, so a gVisor run holds every
/// folder above it as well: no other run holds one of them writable (and
/// could rename the work folder away) while it lasts, either way round,
/// and a link anywhere on the way is refused.
#[test]
fn gvisor_holds_the_folders_above_its_work() {
    ready!();
    if !has_runsc() {
        common::skip("runsc (gVisor) is not installed (apt-get install runsc)");
        return;
    }
    let Some(reg) = Registry::start() else { return };
    let Some(image) = busybox_image(&reg, "acme/gvisor-hold", &config("echo ran")) else {
        return;
    };
    let env = Env::new("oci-gvisor-hold");
    let outer = env.root.join("outer");
    let inner = outer.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    let gvisor = |work: &Path, cmd: &[&str]| {
        let mut c = std::process::Command::new(common::node());
        c.args(["sandbox", "run", "--work"])
            .arg(work)
            .arg("--data-dir")
            .arg(&env.data)
            .args(["--image", &image, "--oci-registry", &reg.host()])
            .args(["--oci-runtime", "gvisor", "--"])
            .args(cmd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    // A tier-1 run holds the outer folder writable: a gVisor run in a
    // folder inside it is refused while it lasts.
    let holder = tier1_run(&env, &outer, "touch started; sleep 30")
        .spawn()
        .unwrap();
    wait_for(&outer.join("started"));
    let out = gvisor(&inner, &["echo x > /work/written"])
        .output()
        .unwrap();
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another run holds"),
        "{}",
        stderr(&out)
    );
    assert!(!inner.join("written").exists());
    // A gVisor run in the inner folder holds the outer one: a tier-1 run
    // there is refused while it lasts, and one in a sibling is not.
    let sibling = outer.join("sibling");
    std::fs::create_dir(&sibling).unwrap();
    std::fs::remove_file(outer.join("started")).unwrap();
    let mut held = gvisor(&inner, &["touch /work/started; sleep 30"])
        .spawn()
        .unwrap();
    wait_for(&inner.join("started"));
    let refused = tier1_run(&env, &outer, "touch /tmp/x; mv inner gone")
        .output()
        .unwrap();
    let beside = tier1_run(&env, &sibling, "echo beside > out")
        .output()
        .unwrap();
    let _ = held.kill();
    let _ = held.wait();
    assert_eq!(refused.status.code(), Some(125), "{}", stderr(&refused));
    assert!(inner.exists(), "the gVisor run's folder was renamed away");
    assert!(beside.status.success(), "{}", stderr(&beside));
    assert_eq!(
        std::fs::read_to_string(sibling.join("out")).unwrap(),
        "beside\n"
    );
    // A link on the way, not only at the end, is refused.
    let link = env.root.join("link");
    std::os::unix::fs::symlink(&outer, &link).unwrap();
    let out = gvisor(&link.join("inner"), &["echo x > /work/through-link"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert!(!inner.join("through-link").exists());
}
