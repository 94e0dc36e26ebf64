//! The probe's processes: the children it starts, the copy of itself that
//! tries to outlive its run, the pair it leaves behind, how it holds, and
//! its attempts on a repository's `.git`.

use std::io::{self, Write};

/// A child that sleeps 30 s: `/bin/sleep`, or on Windows (which has no
/// such program in every container) a copy of this probe that holds.
pub(super) fn sleeper() -> std::process::Command {
    #[cfg(unix)]
    {
        let mut c = std::process::Command::new("/bin/sleep");
        c.arg("30");
        c
    }
    #[cfg(not(unix))]
    {
        let mut c = this_probe().unwrap_or_else(|_| std::process::Command::new("oz0-node.exe"));
        c.args(["--no-syscalls", "--hold-ms", "30000"]);
        c
    }
}

/// Stays alive for `d`, rewriting `beat` (when named) every 50 ms. On Unix
/// it holds a lock on `beat` while it lives, when the wall lets it take
/// one, and then says so in it (`locked …`): the host sees the lock go the
/// moment this process dies, without watching the beats.
pub(super) fn hold(d: std::time::Duration, beat: Option<&std::path::Path>) {
    let until = std::time::Instant::now() + d;
    #[cfg(unix)]
    let lock = beat.and_then(|b| {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(b)
            .ok()?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .ok()
            .map(|()| f)
    });
    #[cfg(not(unix))]
    let lock: Option<std::fs::File> = None;
    let word = if lock.is_some() { "locked" } else { "beat" };
    let mut n: u64 = 0;
    while std::time::Instant::now() < until {
        if let Some(b) = beat {
            n += 1;
            let _ = std::fs::write(b, format!("{word} {n}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(50).min(d));
    }
    drop(lock);
}

/// `sandbox probe` of this very binary, its standard streams closed.
fn this_probe() -> io::Result<std::process::Command> {
    let me = std::env::current_exe()?;
    let mut c = std::process::Command::new(&me);
    // Started through its dynamic loader (a development build in an
    // image's root, whose libraries are beside the loader): so again.
    let loader = me
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("ld-"));
    if let (true, Some(libs), Some(argv0)) = (loader, me.parent(), std::env::args_os().next()) {
        c.arg("--library-path").arg(libs).arg(argv0);
    }
    c.args(["sandbox", "probe"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    Ok(c)
}

/// Starts a copy of this probe that tries to outlive its run: on Unix in a
/// process group of its own; on Windows detached from this console, in a
/// process group of its own, and out of this process's job where the job
/// lets it (else in it). It writes its report to `out`, beats in
/// `out.beat` and holds for `hold_ms`; it is not waited for.
pub(super) fn detach(out: &std::path::Path, hold_ms: u64) -> io::Result<()> {
    let mut beat = out.as_os_str().to_owned();
    beat.push(".beat");
    let mut c = this_probe()?;
    c.args(["--no-syscalls", "--hold-ms"])
        .arg(hold_ms.max(1).to_string())
        .arg("--beat")
        .arg(beat)
        .arg("--out")
        .arg(out);
    #[cfg(unix)]
    {
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        // Never waited for: it is meant to outlive this process.
        c.spawn().map(drop)
    }
    #[cfg(windows)]
    {
        use std::os::windows::process::CommandExt;
        const DETACHED_PROCESS: u32 = 0x0000_0008;
        const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
        const CREATE_BREAKAWAY_FROM_JOB: u32 = 0x0100_0000;
        let flags = DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP;
        // Out of the job first, as an escaping process would try.
        c.creation_flags(flags | CREATE_BREAKAWAY_FROM_JOB);
        if let Ok(child) = c.spawn() {
            drop(child);
            return Ok(());
        }
        c.creation_flags(flags);
        c.spawn().map(drop)
    }
}

/// `--leave-pair`: a copy of this probe in the background, beating in
/// `bg.beat` and detaching one more (`detached.json`), both in the current
/// folder; returns once both beat (at most 10 s), the child kept.
pub(super) fn leave_pair() -> io::Result<std::process::Child> {
    let mut c = this_probe()?;
    c.args([
        "--no-syscalls",
        "--out",
        "bg.json",
        "--beat",
        "bg.beat",
        "--detach",
        "detached.json",
        "--hold-ms",
        "20000",
    ]);
    let child = c.spawn()?;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let beats = [
        std::path::Path::new("bg.beat"),
        std::path::Path::new("detached.json.beat"),
    ];
    while !beats.iter().all(|b| b.exists()) {
        if std::time::Instant::now() >= until {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the background pair did not beat within 10 s",
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(child)
}

/// `--try-git`: each attempt on `.git` in the current folder, the word of
/// each that succeeded written to `results` (the self-test's
/// protected-paths check judges them).
pub(super) fn try_git() -> io::Result<()> {
    use std::fs::OpenOptions;
    let write = |p: &str, text: &str| {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .and_then(|mut f| f.write_all(text.as_bytes()))
    };
    let append = |p: &str| {
        OpenOptions::new()
            .append(true)
            .open(p)
            .and_then(|mut f| f.write_all(b"x\n"))
    };
    let mut ok = Vec::new();
    for (word, r) in [
        ("hooks", write(".git/hooks/pre-commit", "x\n")),
        ("newhook", write(".git/hooks/post-checkout", "x\n")),
        ("config", append(".git/config")),
        ("commondir", write(".git/commondir", "/elsewhere\n")),
        (
            "alternates",
            write(".git/objects/info/alternates", "/elsewhere\n"),
        ),
        ("renamed", std::fs::rename(".git", ".git-aside")),
        ("objects", write(".git/objects/oz0-selftest", "x\n")),
    ] {
        if r.is_ok() {
            ok.push(word);
        }
    }
    let mut text = ok.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    std::fs::write("results", text)
}
