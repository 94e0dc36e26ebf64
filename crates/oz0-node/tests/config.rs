//! Black-box tests of the node's config file (`--config FILE`,
//! `OZ0_NODE_CONFIG`, `/etc/oz0/node.toml`): a flag overrides the file, the
//! file overrides the default, `config show` says where each value came
//! from, and every wrong file is refused before anything starts, with the
//! file, the line and the fix.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{node, stderr, stdout, TempDir};

/// `oz0-node ARGS` with a clean environment (HOME inside `d`) plus `env`.
fn oz0(d: &TempDir, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(node())
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", d.join("home"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn flags_override_the_file_and_the_file_overrides_the_default() {
    let d = TempDir::new("config");
    let f = d.join("node.toml");
    let (d1, d2) = (d.join("from-file"), d.join("from-flag"));
    write(
        &f,
        &format!(
            "# this node\ndata-dir = \"{}\"\nsandbox = \"none\"\n",
            d1.display()
        ),
        0o644,
    );
    let fs = f.display().to_string();
    let facts = |dir: &Path| dir.join("facts.json").is_file();

    // The file's data-dir and sandbox.
    let o = oz0(&d, &["run", "--once", "--config", &fs], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("tier 0"), "{}", stderr(&o));
    assert!(facts(&d1));
    // A flag wins over the file.
    std::fs::remove_dir_all(&d1).unwrap();
    let d2s = d2.display().to_string();
    let o = oz0(
        &d,
        &["run", "--once", "--config", &fs, "--data-dir", &d2s],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(facts(&d2) && !d1.exists());
    // OZ0_NODE_CONFIG names the file too; --no-config reads none (the
    // default data dir under HOME).
    let o = oz0(&d, &["run", "--once"], &[("OZ0_NODE_CONFIG", &fs)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(facts(&d1));
    let o = oz0(
        &d,
        &["run", "--once", "--no-config", "--sandbox", "none"],
        &[("OZ0_NODE_CONFIG", &fs)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(facts(&d.join("home/.local/share/oz0-node")));
    // `facts` reads the file's data-dir.
    let o = oz0(&d, &["facts", "--config", &fs, "--format", "kv"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("sandbox.tier=0"), "{}", stdout(&o));

    // config show: each value and where it came from.
    let o = oz0(&d, &["config", "show", "--json", "--config", &fs], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["file"], fs.as_str());
    let by_key = |k: &str| {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == k)
            .unwrap_or_else(|| panic!("no {k} in {doc:#}"))
            .clone()
    };
    assert_eq!(by_key("data-dir")["values"][0], d1.display().to_string());
    assert_eq!(by_key("data-dir")["source"], format!("{fs}:2"));
    assert_eq!(by_key("sandbox")["source"], format!("{fs}:3"));
    assert_eq!(by_key("keep-jobs-days")["values"][0], "7");
    assert_eq!(by_key("keep-jobs-days")["source"], "default");
    assert_eq!(by_key("edge")["source"], "unset");
    let o = oz0(&d, &["config", "show", "--config", &fs], &[]);
    assert!(
        stdout(&o).contains(&format!("sandbox = \"none\"    # {fs}:3")),
        "{}",
        stdout(&o)
    );

    // `sandbox check` reads the keys it has (bwrap here).
    write(&f, "bwrap = \"/nonexistent/bwrap\"\n", 0o600);
    let o = oz0(&d, &["sandbox", "check", "--config", &fs], &[]);
    assert!(
        stdout(&o).contains("/nonexistent/bwrap is not an executable file"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

#[test]
fn a_wrong_file_is_refused_with_its_line_and_fix() {
    let d = TempDir::new("config-bad");
    let f = d.join("node.toml");
    let fs = f.display().to_string();
    let refused = |text: &str, mode: u32, args: &[&str]| {
        write(&f, text, mode);
        let mut full = vec!["--config", fs.as_str()];
        full.extend_from_slice(args);
        let o = oz0(&d, &full, &[]);
        assert_eq!(o.status.code(), Some(2), "{text:?}: {}", stderr(&o));
        assert!(
            !d.join("home").exists(),
            "{text:?}: something ran before the refusal"
        );
        stderr(&o).replace(&fs, "F")
    };
    let run = &["run", "--once"][..];
    let e = refused("sandbox = \"none\"\n\ndata-dri = \"/x\"\n", 0o600, run);
    assert!(
        e.starts_with(
            "oz0-node: F:3: unknown key `data-dri` — the keys are bwrap, cgroup-root, data-dir,"
        ),
        "{e}"
    );
    let e = refused("jobs = 0\n", 0o600, run);
    assert!(
        e.starts_with("oz0-node: F:1: `jobs = \"0\"`: invalid value '0' for '--jobs <N>': give at least 1 — give a value `--jobs` takes (see `oz0-node run --help`)"),
        "{e}"
    );
    let e = refused("tenant = \"Acme Inc\"\n", 0o600, run);
    assert!(
        e.contains("F:1: `tenant = \"Acme Inc\"`: invalid value"),
        "{e}"
    );
    let e = refused("name = \"Build_01\"\n", 0o600, run);
    assert!(
        e.contains("F:1: `name = \"Build_01\"`: invalid value 'Build_01' for '--name <NAME>'")
            && e.contains("lower-case letters")
            && e.contains("e.g. build-01"),
        "{e}"
    );
    let e = refused("tool-env = [\"OK\", \"not ok\"]\n", 0o600, run);
    assert!(
        e.contains("F:1: `tool-env = \"not ok\"`: invalid value"),
        "{e}"
    );
    let e = refused("sandbox = \"none\"\n[edge]\nurl = \"x\"\n", 0o600, run);
    assert!(
        e.contains("F:2: `[edge]` is a table; the file has no tables"),
        "{e}"
    );
    let e = refused("data-dir = /var/lib/x\n", 0o600, run);
    assert!(e.starts_with("oz0-node: F:1: not TOML: "), "{e}");
    // The file decides where the node keeps its key: others may not change it.
    let e = refused("sandbox = \"none\"\n", 0o664, run);
    assert!(
        e.contains("the config file F has mode 664: others may change it — chmod go-w F"),
        "{e}"
    );
    // So may they not change the folder it lies in (a group-writable one
    // lets another user rename their own file over it).
    let open = d.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
    let inside = open.join("node.toml");
    write(&inside, "sandbox = \"none\"\n", 0o600);
    let o = oz0(
        &d,
        &["--config", &inside.display().to_string(), "run", "--once"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("others may change (mode 775)") && stderr(&o).contains("chmod go-w"),
        "{}",
        stderr(&o)
    );
    // The same checks for `config show`, `facts` and `sandbox check`.
    for args in [
        &["config", "show"][..],
        &["facts"][..],
        &["sandbox", "check"][..],
    ] {
        let e = refused("nonsense = 1\n", 0o600, args);
        assert!(e.contains("F:1: unknown key `nonsense`"), "{args:?}: {e}");
    }
    // A command that reads no file says so.
    let e = refused(
        "sandbox = \"none\"\n",
        0o600,
        &["sandbox", "run", "--", "true"],
    );
    assert!(
        e.starts_with("oz0-node: `oz0-node sandbox run` reads no config file; `oz0-node run`,"),
        "{e}"
    );
    // A file named that is not there.
    std::fs::remove_file(&f).unwrap();
    let o = oz0(&d, &["run", "--once", "--config", &fs], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot read the config file"),
        "{}",
        stderr(&o)
    );
}
