//! Benchmark: the wall time of `oz0-node sandbox run -- /bin/true` against
//! bare bubblewrap, measured in the same run, alternating, and printed as
//! medians and a ratio. Not a test: nothing here asserts a time.
//!
//! `OZ0_NODE_BIN=$(scripts/build-node --release) cargo bench -p oz0-node
//! --bench sandbox_run [-- RUNS]` measures the binary as it ships (static,
//! linked against musl on Linux); without `OZ0_NODE_BIN` it measures cargo's
//! dynamically linked build, and says so. The baseline is
//! `bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true` (bare
//! bubblewrap needs a root to find /bin/true in). `OZ0_NODE_BIN_OTHER` names
//! a second `oz0-node` (another build) to measure in the same rounds. Run
//! it as the node's user: `oz0-node` refuses to run sandboxes as root.
//!
//! A second row measures what a work folder's size adds to a run (the look
//! at git after it walks the whole folder): the same run with an empty work
//! folder against one holding a git repository of `OZ0_BENCH_WORK_FILES`
//! files (default 100,000, in folders of 1,000, committed and packed as a
//! clone is), alternating, as medians and their difference. It is skipped
//! with `OZ0_BENCH_WORK_FILES=0`.
//!
//! A third command is measured in the same rounds: bubblewrap given this
//! run's own arguments (what `sandbox run --dry-run` prints, every mount
//! of the plan) with `/bin/true` in place of the stage. It is the part of
//! a run that bubblewrap does; what `sandbox run` costs above it is the
//! node's process and the stage's.
//!
//! A fourth, in every row: bubblewrap alone protecting the same names. It
//! is given this run's own arguments plus a read-only bind over each of the
//! run's placeholders, which the benchmark's own thread makes in the work
//! folder just before (plain `mkdir` and `O_EXCL` creates) and removes just
//! after. It is what a launcher without the node's stage and placeholder
//! pool would pay here; it is not a floor (bubblewrap reads the whole mount
//! table again after each bind, and the placeholders' making and removal
//! is on its path), and it has no Landlock, seccomp or mount-table check.
//!
//! Two more rows, each against bare bubblewrap in the same run: the CPU a
//! run costs (user and system time of the run and every process of it,
//! from `/proc/self/stat`, the mean per run), and
//! throughput with 4 loops at once, each run in a fresh work folder of its
//! own (bare bubblewrap binds the same kind of fresh folder at `/work`),
//! as runs per second.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod shared;

use shared::{median, p90};

/// Bare bubblewrap's arguments, before its command: a root to find it in.
const BARE: [&str; 5] = ["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"];

fn time(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let st = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("runs");
    let d = t.elapsed();
    assert!(st.success(), "{cmd:?} failed: {st:?}");
    d
}

fn main() {
    let runs = shared::runs(50, 30);
    let (node, _) = shared::node_bin();
    let bwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("bubblewrap is installed");
    let work = std::env::temp_dir().join(format!("oz0-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let work = work.canonicalize().unwrap();
    let data = std::env::temp_dir().join(format!("oz0-bench-data-{}", std::process::id()));

    let mut bare = Vec::new();
    let mut ours = Vec::new();
    let mut layouts = Vec::new();
    let (layout_args, holders) = plan_args(&node, &work, &data);
    let layout_cmd = || {
        let mut c = Command::new(bwrap);
        c.args(&layout_args).arg("/bin/true");
        c
    };
    let alone = Alone {
        bwrap,
        args: &layout_args,
        holders: &holders,
        work: &work,
    };
    let bare_cmd = || {
        let mut c = Command::new(bwrap);
        c.args(BARE).arg("/bin/true");
        c
    };
    let other = std::env::var_os("OZ0_NODE_BIN_OTHER").map(PathBuf::from);
    let node_cmd = |bin: &PathBuf| node_true(bin, &work, &data);
    let mut others = Vec::new();
    let mut alones = Vec::new();
    // Warm up the page cache for all.
    for _ in 0..3 {
        time(&mut bare_cmd());
        time(&mut layout_cmd());
        alone.time(&work);
        time(&mut node_cmd(&node));
        if let Some(o) = &other {
            time(&mut node_cmd(o));
        }
    }
    for _ in 0..runs {
        bare.push(time(&mut bare_cmd()));
        layouts.push(time(&mut layout_cmd()));
        alones.push(alone.time(&work));
        ours.push(time(&mut node_cmd(&node)));
        if let Some(o) = &other {
            others.push(time(&mut node_cmd(o)));
        }
    }
    let (mb, mo) = (median(&mut bare), median(&mut ours));
    let (pb, po) = (p90(&mut bare), p90(&mut ours));
    println!(
        "sandbox_run: {runs} runs each, alternating, as uid {}",
        rustix_uid()
    );
    println!("  measured: {} ({})", node.display(), linkage(&node));
    println!(
        "  bare bwrap {} /bin/true: median {:.2} ms, p90 {:.2} ms",
        BARE.join(" "),
        ms(mb),
        ms(pb)
    );
    println!("  oz0-node sandbox run -- /bin/true:                             median {:.2} ms, p90 {:.2} ms", ms(mo), ms(po));
    println!("  ratio (median): {:.2} (goal <= 1.3)", ms(mo) / ms(mb));
    compare(
        "bwrap with this run's own arguments, /bin/true for the stage",
        &mut layouts,
        mb,
        mo,
        "above it, the node's process and the stage",
    );
    compare(
        &format!(
            "bwrap alone protecting the same names: those arguments, its {} placeholders made, bound read-only by bwrap and removed",
            holders.len()
        ),
        &mut alones,
        mb,
        mo,
        "oz0-node against it",
    );
    if let Some(o) = &other {
        let (m, p) = (median(&mut others), p90(&mut others));
        println!(
            "  other build {}: median {:.2} ms, p90 {:.2} ms, ratio {:.2}",
            o.display(),
            ms(m),
            ms(p),
            ms(m) / ms(mb)
        );
    }
    cpu_per_run(&bare_cmd, &layout_cmd, &alone, &node_cmd, &node, runs);
    parallel_loops(bwrap, &node, &data, &alone, runs);
    let files: usize = std::env::var("OZ0_BENCH_WORK_FILES")
        .ok()
        .map(|v| v.parse().expect("OZ0_BENCH_WORK_FILES is a number"))
        .unwrap_or(100_000);
    if files > 0 {
        let big = std::env::temp_dir().join(format!("oz0-bench-big-{}", std::process::id()));
        let t = Instant::now();
        repository(&big, files);
        println!(
            "  work folder: a git repository of {files} files, made in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let big = big.canonicalize().unwrap();
        let run_in = |bin: &PathBuf, w: &PathBuf| node_true(bin, w, &data);
        let mut bins = vec![node.clone()];
        bins.extend(other.clone());
        let rounds = (runs / 2).max(15);
        let mut empty = vec![Vec::new(); bins.len()];
        let mut full = vec![Vec::new(); bins.len()];
        for b in &bins {
            time(&mut run_in(b, &work));
            time(&mut run_in(b, &big));
        }
        for _ in 0..rounds {
            for (i, b) in bins.iter().enumerate() {
                empty[i].push(time(&mut run_in(b, &work)));
                full[i].push(time(&mut run_in(b, &big)));
            }
        }
        println!("  work folder size, {rounds} runs each, alternating:");
        for (i, b) in bins.iter().enumerate() {
            let (me, mf) = (median(&mut empty[i]), median(&mut full[i]));
            println!(
                "    {}: empty median {:.2} ms, {files} files median {:.2} ms (p90 {:.2} ms): {:+.2} ms",
                b.display(),
                ms(me),
                ms(mf),
                ms(p90(&mut full[i])),
                ms(mf) - ms(me)
            );
        }
        let _ = std::fs::remove_dir_all(&big);
    }
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&data);
}

/// Prints a command's row against bare bubblewrap (median `bare`), and
/// `oz0-node`'s (median `ours`) against it.
fn compare(what: &str, times: &mut [Duration], bare: Duration, ours: Duration, against: &str) {
    let (m, p) = (median(times), p90(times));
    println!(
        "  {what}: median {:.2} ms, p90 {:.2} ms ({:.2}x bare)",
        ms(m),
        ms(p),
        ms(m) / ms(bare)
    );
    println!(
        "    {against}: {:+.2} ms ({:.2}x)",
        ms(ours) - ms(m),
        ms(ours) / ms(m)
    );
}

/// `oz0-node sandbox run -- /bin/true` in `work`, with the data directory `data`.
fn node_true(bin: &std::path::Path, work: &std::path::Path, data: &std::path::Path) -> Command {
    node_true_with(bin, work, data, &[])
}

/// [`node_true`] with more `flags`.
fn node_true_with(
    bin: &std::path::Path,
    work: &std::path::Path,
    data: &std::path::Path,
    flags: &[&str],
) -> Command {
    let mut c = Command::new(bin);
    c.args(["sandbox", "run", "--work"])
        .arg(work)
        .arg("--data-dir")
        .arg(data)
        .args(flags)
        .args(["--", "/bin/true"]);
    c
}

/// bubblewrap's arguments for `node_true`'s run, from `--dry-run`,
/// without the status descriptor (the node's to pass), and the run's
/// placeholders (whether a folder, and where).
fn plan_args(
    bin: &std::path::Path,
    work: &std::path::Path,
    data: &std::path::Path,
) -> (Vec<String>, Vec<(bool, PathBuf)>) {
    let out = node_true_with(bin, work, data, &["--dry-run"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "--dry-run failed: {out:?}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON plan");
    let args: Vec<String> = plan["bwrap_args"]
        .as_array()
        .expect("bwrap_args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect();
    let at = args
        .iter()
        .position(|a| a == "--json-status-fd")
        .expect("the plan passes a status descriptor");
    let holders = plan["placeholders"]
        .as_array()
        .expect("placeholders")
        .iter()
        .map(|p| {
            (
                p["kind"] == "dir",
                PathBuf::from(p["path"].as_str().expect("a path")),
            )
        })
        .collect();
    ([&args[..at], &args[at + 2..]].concat(), holders)
}

/// bubblewrap alone protecting the run's names: its own arguments and a
/// read-only bind over each placeholder, the placeholders made just before
/// and removed just after by this thread.
struct Alone<'a> {
    bwrap: &'a str,
    args: &'a [String],
    /// The placeholders, under `work`.
    holders: &'a [(bool, PathBuf)],
    work: &'a std::path::Path,
}

impl Alone<'_> {
    /// One run in `work` (the plan's work folder or another, fresh one):
    /// its wall time.
    fn time(&self, work: &std::path::Path) -> Duration {
        let t = Instant::now();
        self.run(work);
        t.elapsed()
    }

    fn run(&self, work: &std::path::Path) {
        let moved =
            |p: &std::path::Path| work.join(p.strip_prefix(self.work).expect("in the work folder"));
        let holders: Vec<(bool, PathBuf)> =
            self.holders.iter().map(|(d, p)| (*d, moved(p))).collect();
        for (dir, p) in &holders {
            if *dir {
                std::fs::create_dir(p).expect("a placeholder folder");
            } else {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(p)
                    .expect("a placeholder file");
            }
        }
        let mut c = Command::new(self.bwrap);
        for a in self.args {
            match std::path::Path::new(a).strip_prefix(self.work) {
                Ok(rest) => c.arg(work.join(rest)),
                Err(_) => c.arg(a),
            };
        }
        for (_, p) in &holders {
            c.arg("--ro-bind").arg(p).arg(p);
        }
        c.arg("/bin/true");
        time(&mut c);
        for (dir, p) in &holders {
            if *dir {
                std::fs::remove_dir(p).expect("the placeholder folder goes");
            } else {
                std::fs::remove_file(p).expect("the placeholder file goes");
            }
        }
    }
}

/// User plus system time of this process's waited-for children so far.
fn children_cpu() -> Duration {
    shared::cpu_of("self").1
}

/// The CPU a run costs, bare bubblewrap, bubblewrap with the run's own
/// arguments and the node alternating in batches of 10 (a batch's sum is
/// exact to a clock tick): the mean.
fn cpu_per_run(
    bare: &dyn Fn() -> Command,
    layout: &dyn Fn() -> Command,
    alone: &Alone,
    node: &dyn Fn(&PathBuf) -> Command,
    bin: &PathBuf,
    runs: usize,
) {
    const BATCH: usize = 10;
    // Bare bubblewrap exits as soon as its command has: its own init (the
    // sandbox's pid 1, which ran the command) ends after it, reparented,
    // and a process nobody here waited for is counted in nobody's
    // children's time. As the runs' subreaper, this process reaps it, and
    // its time counts. (The node waits for every process of its runs.)
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).expect("a subreaper");
    let batches = runs.div_ceil(BATCH).max(4);
    let (mut b, mut l, mut o) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut f = Duration::ZERO;
    for _ in 0..batches {
        let t = children_cpu();
        for _ in 0..BATCH {
            time(&mut bare());
            reap_orphans();
        }
        b += children_cpu() - t;
        let t = children_cpu();
        for _ in 0..BATCH {
            time(&mut layout());
            reap_orphans();
        }
        l += children_cpu() - t;
        // bwrap alone: its placeholders are this thread's own work.
        let (t, own) = (children_cpu(), thread_cpu());
        for _ in 0..BATCH {
            alone.run(alone.work);
            reap_orphans();
        }
        f += children_cpu() - t + (thread_cpu() - own);
        let t = children_cpu();
        for _ in 0..BATCH {
            time(&mut node(bin));
            reap_orphans();
        }
        o += children_cpu() - t;
    }
    let n = u32::try_from(batches * BATCH).unwrap_or(u32::MAX);
    rustix::process::set_child_subreaper(None).expect("no longer a subreaper");
    let (mb, ml, mf, mo) = (b / n, l / n, f / n, o / n);
    println!("  CPU per run (user+system of every process of the run, reaped as its subreaper), {n} runs each, alternating in batches of {BATCH}:");
    println!(
        "    bare bwrap mean {:.2} ms; oz0-node sandbox run mean {:.2} ms; ratio {:.2} (goal <= 1.4)",
        ms(mb),
        ms(mo),
        ms(mo) / ms(mb)
    );
    println!(
        "    bwrap with this run's own arguments mean {:.2} ms ({:.2}x bare); above it {:+.2} ms",
        ms(ml),
        ms(ml) / ms(mb),
        ms(mo) - ms(ml)
    );
    println!(
        "    bwrap alone protecting the same names (its placeholders made and removed) mean {:.2} ms ({:.2}x bare); oz0-node {:.2}x it, {:+.2} ms",
        ms(mf),
        ms(mf) / ms(mb),
        ms(mo) / ms(mf),
        ms(mo) - ms(mf)
    );
}

/// User plus system time of this thread so far.
fn thread_cpu() -> Duration {
    shared::cpu_of("thread-self").0
}

/// Waits for every child this process has left: what the runs left it
/// as their subreaper (its direct children are waited for already).
fn reap_orphans() {
    use rustix::process::{wait, WaitOptions};
    while let Ok(Some(_)) = wait(WaitOptions::empty()) {}
}

/// Runs per second with 4 loops at once, each run in a fresh work folder.
fn parallel_loops(
    bwrap: &str,
    node: &std::path::Path,
    data: &std::path::Path,
    alone: &Alone,
    runs: usize,
) {
    const LOOPS: usize = 4;
    let per_loop = runs.max(20);
    let root = std::env::temp_dir().join(format!("oz0-bench-par-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Side {
        Bare,
        Alone,
        Ours,
    }
    let rate = |side: Side, round: usize| {
        let t = Instant::now();
        std::thread::scope(|s| {
            for l in 0..LOOPS {
                let root = &root;
                s.spawn(move || {
                    for i in 0..per_loop {
                        let w = root.join(format!("{round}-{l}-{i}-{side:?}"));
                        std::fs::create_dir(&w).unwrap();
                        match side {
                            Side::Ours => {
                                time(&mut node_true(node, &w, data));
                            }
                            Side::Alone => alone.run(&w),
                            Side::Bare => {
                                let mut c = Command::new(bwrap);
                                c.args(BARE).arg("--bind").arg(&w).args([
                                    "/work",
                                    "--chdir",
                                    "/work",
                                    "/bin/true",
                                ]);
                                time(&mut c);
                            }
                        }
                    }
                });
            }
        });
        (LOOPS * per_loop) as f64 / t.elapsed().as_secs_f64()
    };
    // Two rounds each, alternating; the mean of each side.
    let (mut b, mut f, mut o) = (0.0, 0.0, 0.0);
    for round in 0..2 {
        b += rate(Side::Bare, round) / 2.0;
        f += rate(Side::Alone, round) / 2.0;
        o += rate(Side::Ours, round) / 2.0;
    }
    println!(
        "  {LOOPS} loops at once, a fresh work folder per run, {} runs a side in 2 rounds:",
        2 * LOOPS * per_loop
    );
    println!(
        "    bare bwrap {b:.0} runs/s; oz0-node sandbox run {o:.0} runs/s; ratio {:.2} (goal >= 0.8)",
        o / b
    );
    println!(
        "    bwrap alone protecting the same names (its placeholders made and removed) {f:.0} runs/s ({:.2}x bare); oz0-node {:.2}x it",
        f / b,
        o / f
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A git repository of `files` small files in `dir`, in folders of 1,000,
/// committed and packed (as a clone is).
fn repository(dir: &std::path::Path, files: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..files {
        let sub = dir.join(format!("d{:04}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    let git = |args: &[&str]| {
        let st = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            // No gc of its own in the background: the one below would
            // find it running and fail.
            .args(["-c", "gc.auto=0"])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("git is installed");
        assert!(st.success(), "git {args:?} failed: {st:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "files"]);
    git(&["gc", "-q"]);
    // Written out before anything is timed.
    let _ = Command::new("sync").status();
}

/// "static" when the ELF file has no PT_INTERP program header (no dynamic
/// loader), else "dynamically linked".
fn linkage(bin: &std::path::Path) -> &'static str {
    let Ok(data) = std::fs::read(bin) else {
        return "unreadable";
    };
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    if data.len() < 64 || &data[..4] != b"\x7fELF" {
        return "not ELF";
    }
    let Ok(phoff) = usize::try_from(u64::from_le_bytes(data[32..40].try_into().unwrap())) else {
        return "not ELF";
    };
    let (size, count) = (u16_at(54), u16_at(56));
    let interp = (0..count).any(|i| {
        let o = phoff + i * size;
        data.get(o..o + 4) == Some(&3u32.to_le_bytes()[..])
    });
    if interp {
        "dynamically linked: the shipped build is static, see scripts/build-node"
    } else {
        "static"
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rustix_uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        })
        .unwrap_or_else(|| "?".into())
}
