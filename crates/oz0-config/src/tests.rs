//! Precedence (flag > environment > file > default) and every refusal,
//! against a small command shaped like the binaries'.

use super::*;
use clap::{value_parser, Arg};
use std::sync::atomic::{AtomicU32, Ordering};

fn cmd() -> Command {
    let data = || Arg::new("data_dir").long("data-dir");
    Command::new("prog")
        .arg(
            Arg::new("config")
                .long("config")
                .global(true)
                .value_parser(value_parser!(PathBuf)),
        )
        .arg(
            Arg::new("no_config")
                .long("no-config")
                .global(true)
                .action(ArgAction::SetTrue),
        )
        .subcommand(
            Command::new("run")
                .arg(data())
                .arg(
                    Arg::new("jobs")
                        .long("jobs")
                        .value_parser(value_parser!(u64).range(1..)),
                )
                .arg(
                    Arg::new("tool_env")
                        .long("tool-env")
                        .action(ArgAction::Append),
                )
                .arg(
                    Arg::new("sandbox")
                        .long("sandbox")
                        .value_parser(["auto", "none"])
                        .default_value("auto"),
                )
                .arg(
                    Arg::new("verbose")
                        .long("verbose")
                        .action(ArgAction::SetTrue),
                )
                .arg(Arg::new("cmd").num_args(0..).last(true)),
        )
        .subcommand(Command::new("check").arg(data()))
        // The only command with a flag read from the environment.
        .subcommand(
            Command::new("serve").arg(Arg::new("store").long("store").env("OZ0_CONFIG_TEST_STORE")),
        )
        .subcommand(Command::new("adhoc").arg(data()))
}

const SPEC: Spec = Spec {
    program: "prog",
    default_path: "/nonexistent/oz0-config-test.toml",
    env: "OZ0_CONFIG_TEST_FILE",
    commands: &[
        (
            &["run"],
            &[
                "data-dir", "jobs", "tool-env", "sandbox", "store", "verbose",
            ],
        ),
        (&["check"], &["data-dir"]),
        (&["serve"], &["store"]),
    ],
};

static N: AtomicU32 = AtomicU32::new(0);

/// A test's file, removed when the test is done with it.
struct TmpFile(PathBuf);

impl std::ops::Deref for TmpFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TmpFile {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A file holding `text`, mode 0644.
fn file(text: &str) -> TmpFile {
    let p = std::env::temp_dir().join(format!(
        "oz0-config-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::write(&p, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    TmpFile(p)
}

fn argv(a: &[&str]) -> Vec<OsString> {
    a.iter().map(OsString::from).collect()
}

/// Applies, parses, and returns the run's matches with the applied state.
fn run_with(f: &Path, args: &[&str]) -> (ArgMatches, Applied) {
    let mut full = vec!["prog", "--config", f.to_str().unwrap(), "run"];
    full.extend_from_slice(args);
    let a = apply(&cmd(), argv(&full), &SPEC).unwrap();
    let m = cmd().try_get_matches_from(&a.argv).unwrap();
    let (_, sub) = m.subcommand().unwrap();
    (sub.clone(), a)
}

fn show(m: &ArgMatches, a: &Applied) -> Vec<(String, Vec<String>, String)> {
    let c = cmd();
    let run = c.find_subcommand("run").unwrap();
    effective(m, a, SPEC.commands[0].1, run, &|_, v| v.to_string())
        .into_iter()
        .map(|s| (s.key, s.values, s.source))
        .collect()
}

#[test]
fn flags_override_the_file_and_the_file_overrides_defaults() {
    let f = file(
        "# the node\ndata-dir = \"/var/lib/x\"\njobs = 3\ntool-env = [\"A\", \"B\"]\nsandbox = \"none\"\nverbose = true\n",
    );
    let (m, a) = run_with(&f, &["--jobs", "5", "--", "echo", "hi"]);
    assert_eq!(m.get_one::<String>("data_dir").unwrap(), "/var/lib/x");
    assert_eq!(m.get_one::<u64>("jobs"), Some(&5));
    let envs: Vec<&String> = m.get_many::<String>("tool_env").unwrap().collect();
    assert_eq!(envs, ["A", "B"]);
    assert_eq!(m.get_one::<String>("sandbox").unwrap(), "none");
    assert!(m.get_flag("verbose"));
    // The command after `--` is untouched.
    let c: Vec<&String> = m.get_many::<String>("cmd").unwrap().collect();
    assert_eq!(c, ["echo", "hi"]);
    let fp = f.display().to_string();
    assert_eq!(
        show(&m, &a),
        [
            (
                "data-dir".into(),
                vec!["/var/lib/x".into()],
                format!("{fp}:2")
            ),
            ("jobs".into(), vec!["5".into()], "flag".into()),
            (
                "tool-env".into(),
                vec!["A".into(), "B".into()],
                format!("{fp}:4")
            ),
            ("sandbox".into(), vec!["none".into()], format!("{fp}:5")),
            ("verbose".into(), vec!["true".into()], format!("{fp}:6")),
        ]
    );
    // A list on the command line replaces the file's.
    let (m, _) = run_with(&f, &["--tool-env", "C"]);
    let envs: Vec<&String> = m.get_many::<String>("tool_env").unwrap().collect();
    assert_eq!(envs, ["C"]);
    // Without a file: the defaults.
    let (m, a) = run_with(&file(""), &[]);
    assert_eq!(m.get_one::<String>("sandbox").unwrap(), "auto");
    assert_eq!(show(&m, &a)[3].2, "default");
    std::fs::remove_file(f).unwrap();
}

#[test]
fn the_environment_overrides_the_file() {
    let f = file("store = \"sqlite:/from/file\"\n");
    let serve = |f: &Path| {
        let a = apply(
            &cmd(),
            argv(&["prog", "--config", f.to_str().unwrap(), "serve"]),
            &SPEC,
        )
        .unwrap();
        let m = cmd().try_get_matches_from(&a.argv).unwrap();
        let sub = m.subcommand_matches("serve").unwrap().clone();
        let c = cmd();
        let shown = effective(
            &sub,
            &a,
            &["store"],
            c.find_subcommand("serve").unwrap(),
            &|_, v| v.replace("env", "***"),
        );
        (
            sub.get_one::<String>("store").unwrap().clone(),
            shown[0].clone(),
        )
    };
    // Only this test sets the variable, and only the `serve` command reads it.
    std::env::set_var("OZ0_CONFIG_TEST_STORE", "sqlite:/from/env");
    let (store, shown) = serve(&f);
    std::env::remove_var("OZ0_CONFIG_TEST_STORE");
    assert_eq!(store, "sqlite:/from/env");
    assert_eq!(shown.source, "environment");
    // `redact` decides what is shown.
    assert_eq!(shown.values, ["sqlite:/from/***"]);
    let (store, shown) = serve(&f);
    assert_eq!(store, "sqlite:/from/file");
    assert!(shown.source.ends_with(":1"), "{shown:?}");
}

fn refused(text: &str) -> String {
    let f = file(text);
    let e = apply(
        &cmd(),
        argv(&["prog", "--config", f.to_str().unwrap(), "run"]),
        &SPEC,
    )
    .unwrap_err();
    std::fs::remove_file(&f).unwrap();
    e.to_string().replace(&f.display().to_string(), "F")
}

#[test]
fn every_wrong_line_is_refused_with_its_line_and_fix() {
    assert_eq!(
        refused("jobs = 2\n\ndata-dri = \"/x\"\n"),
        "F:3: unknown key `data-dri` — the keys are data-dir, jobs, sandbox, store, tool-env, verbose"
    );
    let m = refused("data-dir = \"/x\"\njobs = 0\n");
    assert!(
        m.starts_with("F:2: `jobs = \"0\"`: invalid value '0' for '--jobs"),
        "{m}"
    );
    assert!(
        m.ends_with("— give a value `--jobs` takes (see `prog run --help`)"),
        "{m}"
    );
    let m = refused("sandbox = \"psec\"\n");
    assert!(
        m.starts_with("F:1: `sandbox = \"psec\"`: invalid value"),
        "{m}"
    );
    let m = refused("jobs = \"two\"\n");
    assert!(
        m.starts_with("F:1: `jobs = \"two\"`: invalid value 'two'"),
        "{m}"
    );
    assert_eq!(
        refused("data-dir = [\"/a\", \"/b\"]\n"),
        "F:1: `data-dir` takes one value, not a list — give one value, e.g. `data-dir = \"…\"`"
    );
    assert_eq!(
        refused("tool-env = [[\"A\"]]\n"),
        "F:1: `tool-env` holds a list of plain values — give `tool-env = [\"…\", \"…\"]` (or one value)"
    );
    assert_eq!(
        refused("verbose = \"yes\"\n"),
        "F:1: `verbose` is true or false — give `verbose = true` or `false`"
    );
    assert_eq!(
        refused("jobs = 1\n[run]\njobs = 2\n"),
        "F:2: `[run]` is a table; the file has no tables — write every key at the top of the file"
    );
    let m = refused("jobs = 1\ndata-dir = /x\n");
    assert!(m.starts_with("F:2: not TOML: "), "{m}");
    assert!(
        m.ends_with("— write `key = value` lines (strings in quotes)"),
        "{m}"
    );
}

#[test]
fn a_command_reads_its_own_keys_and_leaves_the_others() {
    // `check` reads data-dir; `jobs` (even a wrong one) is run's to check.
    let f = file("data-dir = \"/d\"\njobs = 0\n");
    let a = apply(
        &cmd(),
        argv(&["prog", "--config", f.to_str().unwrap(), "check"]),
        &SPEC,
    )
    .unwrap();
    let m = cmd().try_get_matches_from(&a.argv).unwrap();
    assert_eq!(
        m.subcommand_matches("check")
            .unwrap()
            .get_one::<String>("data_dir")
            .unwrap(),
        "/d"
    );
    // A command that reads none refuses --config, and ignores the default.
    let e = apply(
        &cmd(),
        argv(&["prog", "--config", f.to_str().unwrap(), "adhoc"]),
        &SPEC,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`prog adhoc` reads no config file; `prog run`, `prog check`, `prog serve` do — drop --config"
    );
    let a = apply(&cmd(), argv(&["prog", "adhoc"]), &SPEC).unwrap();
    assert_eq!(a.argv, argv(&["prog", "adhoc"]));
    // --no-config reads nothing, even when a file is named.
    let a = apply(
        &cmd(),
        argv(&[
            "prog",
            "--config",
            f.to_str().unwrap(),
            "--no-config",
            "check",
        ]),
        &SPEC,
    )
    .unwrap();
    assert!(a.file.is_none());
    std::fs::remove_file(f).unwrap();
}

#[test]
fn a_missing_or_unreadable_file_named_is_refused() {
    let e = apply(
        &cmd(),
        argv(&["prog", "--config", "/nonexistent/x.toml", "run"]),
        &SPEC,
    )
    .unwrap_err();
    let m = e.to_string();
    assert!(
        m.starts_with("cannot read the config file /nonexistent/x.toml:"),
        "{m}"
    );
    assert!(
        m.contains("--config or OZ0_CONFIG_TEST_FILE (or --no-config)"),
        "{m}"
    );
    // The default path, absent, is no error: there is no file.
    let a = apply(&cmd(), argv(&["prog", "run"]), &SPEC).unwrap();
    assert!(a.file.is_none());
}

#[cfg(unix)]
#[test]
fn a_file_others_may_change_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let f = file("jobs = 1\n");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
    let e = apply(
        &cmd(),
        argv(&["prog", "--config", f.to_str().unwrap(), "run"]),
        &SPEC,
    )
    .unwrap_err();
    let m = e.to_string().replace(&f.display().to_string(), "F");
    assert_eq!(
        m,
        "the config file F has mode 664: others may change it — chmod go-w F"
    );
    std::fs::remove_file(f).unwrap();
}

/// `config show`'s text is TOML that the node reads back as its file, to
/// the same settings: strings escaped as TOML escapes them, integers,
/// booleans, lists, and unset keys as comments.
#[test]
fn what_config_show_prints_reads_back_as_the_same_file() {
    let f = file(
        "data-dir = \"/var/lib/a \\\"b\\\" \\\\c\\u001b\"\njobs = 3\ntool-env = [\"A\", \"B\"]\nverbose = true\n",
    );
    let (m, a) = run_with(&f, &[]);
    let c = cmd();
    let run = c.find_subcommand("run").unwrap();
    let settings = effective(&m, &a, SPEC.commands[0].1, run, &|_, v| v.to_string());
    let text = render(&settings);
    let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        doc["data-dir"].as_str(),
        Some("/var/lib/a \"b\" \\c\u{1b}"),
        "{text}"
    );
    assert_eq!(doc["jobs"].as_integer(), Some(3), "{text}");
    assert_eq!(doc["verbose"].as_bool(), Some(true), "{text}");
    let unset = render(&[Setting {
        key: "edge".into(),
        values: vec![],
        source: "unset".into(),
    }]);
    assert_eq!(unset, "# edge = (unset)\n");
    assert!(toml::from_str::<toml::Table>(&unset).unwrap().is_empty());
    // Read back as the file, it gives the same values.
    let again = file(&text);
    let (m2, a2) = run_with(&again, &[]);
    let values = |m: &ArgMatches, a: &Applied| -> Vec<(String, Vec<String>)> {
        show(m, a).into_iter().map(|(k, v, _)| (k, v)).collect()
    };
    assert_eq!(values(&m2, &a2), values(&m, &a), "{text}");
    std::fs::remove_file(f).unwrap();
    std::fs::remove_file(again).unwrap();
}

#[test]
fn only_a_file_that_could_apply_is_parsed_for() {
    // SPEC's default path does not exist and its variable is unset here.
    assert!(std::env::var_os(SPEC.env).is_none());
    assert!(!Path::new(SPEC.default_path).exists());
    for no in [
        argv(&["node", "run", "--work", "/w"]),
        // A command's own --config, after `--`.
        argv(&["node", "run", "--", "tool", "--config", "x"]),
    ] {
        assert!(!may_apply(&no, &SPEC), "{no:?}");
        // Then apply gives the command line back as it is.
        let a = apply(&cmd(), no.clone(), &SPEC).unwrap();
        assert_eq!(a.argv, no);
        assert!(a.file.is_none());
    }
    for yes in [
        argv(&["node", "--config", "/f.toml", "run"]),
        argv(&["node", "run", "--config=/f.toml"]),
    ] {
        assert!(may_apply(&yes, &SPEC), "{yes:?}");
    }
}
