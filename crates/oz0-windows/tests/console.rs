//! No run is given the node's console (Windows, under Wine in CI): a
//! stream that is the console reaches the run as a pipe the node carries,
//! and a run without a pseudo console of its own gets a hidden console,
//! so that what it writes to `CON` (or types into `CONIN$`) never reaches
//! the node's; and a run started from a terminal gets a console of its
//! own, fed with the terminal's keys. Each test starts itself again as
//! the node, on a pseudo console whose output it reads and into which it
//! types.
#![cfg(windows)]
// The console calls below have no safe binding.
#![allow(unsafe_code)]

use std::os::windows::io::{AsHandle, AsRawHandle};
use std::time::Duration;

use oz0_core::{RunIo, Stdio};
use oz0_windows::env::WinVar;
use oz0_windows::native::PseudoConsole;
use oz0_windows::native::{create_suspended, on_a_terminal, wait_for, Spawn, StdHandles};
use oz0_windows::supervise::Woke;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use windows_sys::Win32::System::Console::{
    GetConsoleMode, SetStdHandle, COORD, ENABLE_LINE_INPUT, ENABLE_VIRTUAL_TERMINAL_INPUT,
    STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
};

/// The variable that makes this test binary the node on a console, for
/// the test it names.
const AS_NODE: &str = "OZ0_TEST_CONSOLE_NODE";

/// Makes this process's console its three streams, as a node's started
/// from a terminal, for the rest of its life.
fn console_streams() -> Result<(), String> {
    let open = |name: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name)
            .map_err(|e| format!("{name}: {e}"))
    };
    let (conin, conout) = (open("CONIN$")?, open("CONOUT$")?);
    for (h, f) in [
        (STD_INPUT_HANDLE, &conin),
        (STD_OUTPUT_HANDLE, &conout),
        (STD_ERROR_HANDLE, &conout),
    ] {
        // SAFETY: a live console handle of ours, kept open until the end.
        unsafe { SetStdHandle(h, f.as_raw_handle()) };
    }
    // They are this process's streams from here on, to its end.
    std::mem::forget((conin, conout));
    Ok(())
}

/// As the node on a console: its streams are the console's (as a node's
/// started from a terminal), and its run writes one line to its stdout
/// and one to `CON`. What went wrong, if anything.
fn node_on_a_console() -> Result<(), String> {
    console_streams()?;
    if !on_a_terminal() {
        return Err("the node's streams are not a console".into());
    }
    let mut std = StdHandles::new(RunIo {
        stdin: Stdio::Null,
        stdout: Stdio::Inherit,
        stderr: Stdio::Null,
    })
    .map_err(|e| e.to_string())?;
    let carriers = std.take_carriers();
    let child = create_suspended(&Spawn {
        program: &cmd(),
        command_line: "cmd.exe /c echo oz0-carried & echo oz0-direct >CON",
        cwd: &system_root(),
        env_block: &env_block(&[]),
        std: Some(&std),
        pseudo_console: None,
        security_env: None,
    })
    .map_err(|e| e.to_string())?;
    drop(std);
    child.resume().map_err(|e| e.to_string())?;
    match wait_for(child.process.as_handle(), None, Some(30_000)) {
        Ok(Woke::Exited(_)) => {}
        other => return Err(format!("the run did not end: {other:?}")),
    }
    drop(child);
    carriers.finish(Duration::from_secs(10));
    Ok(())
}

fn system_root() -> String {
    std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\windows".into())
}

fn cmd() -> String {
    format!("{}\\system32\\cmd.exe", system_root())
}

/// This process's environment and `extra`, as a block.
fn env_block(extra: &[(&str, &str)]) -> Vec<u16> {
    let vars: Vec<WinVar> = std::env::vars()
        .chain(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())))
        .map(|(name, value)| WinVar { name, value })
        .collect();
    oz0_windows::env::environment_block(&vars)
}

/// Keys the test types, when it chooses.
struct Keys(std::sync::mpsc::Receiver<u8>);

impl std::io::Read for Keys {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.recv(), buf.first_mut()) {
            (Ok(k), Some(b)) => {
                *b = k;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until the console has shown `what`, at most 60 s.
    fn shows(&self, what: &str) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if self.text().contains(what) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The test binary started again as the node, running the test `name`,
/// on a pseudo console of 120×40: `drive` types into it as it shows what
/// it shows; then the node is let end, and all it showed is returned.
fn as_node(name: &str, drive: impl FnOnce(&Sink, &Sender<u8>)) -> String {
    let sink = Sink::default();
    let (keys, rx) = std::sync::mpsc::channel::<u8>();
    let pc = PseudoConsole::open(COORD { X: 120, Y: 40 }, Keys(rx), sink.clone()).unwrap();
    let me = std::env::current_exe().unwrap();
    let me = me.to_str().unwrap();
    let node = create_suspended(&Spawn {
        program: me,
        command_line: &format!("\"{me}\" {name} --exact --nocapture"),
        cwd: &system_root(),
        env_block: &env_block(&[(AS_NODE, name)]),
        std: None,
        pseudo_console: Some(pc.handle()),
        security_env: None,
    })
    .unwrap();
    node.resume().unwrap();
    drive(&sink, &keys);
    sink.shows("oz0-node-");
    // Everything up to the node's last line is drawn by now; a key for
    // each read still waiting on its console lets it end.
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..2 {
        let _ = keys.send(b'\r');
        std::thread::sleep(Duration::from_millis(300));
    }
    let woke = wait_for(node.process.as_handle(), None, Some(60_000));
    assert!(matches!(woke, Ok(Woke::Exited(_))), "{woke:?}");
    drop(pc);
    let text = sink.text();
    assert!(
        !text.contains("oz0-node-failed"),
        "the node's part failed: {text:?}"
    );
    assert!(
        text.contains("oz0-node-done"),
        "the node did not finish: {text:?}"
    );
    text
}

/// Runs `part` when this process is the node of the test `name`: true
/// then (the test's own part is not to run).
fn node_part(name: &str, part: fn() -> Result<(), String>) -> bool {
    if std::env::var(AS_NODE).as_deref() != Ok(name) {
        return false;
    }
    let r = part();
    match &r {
        Ok(()) => println!("oz0-node-done"),
        Err(e) => println!("oz0-node-failed: {e}"),
    }
    // A console loses what it was still to draw when its process ends:
    // the test's key ends it once it has been read.
    let _ = std::io::stdin().read_line(&mut String::new());
    r.unwrap();
    true
}

#[test]
fn a_run_writes_to_the_console_only_through_the_node() {
    let name = "a_run_writes_to_the_console_only_through_the_node";
    if node_part(name, node_on_a_console) {
        return;
    }
    let text = as_node(name, |_, _| {});
    assert!(
        text.contains("oz0-carried"),
        "the run's stdout did not reach the console: {text:?}"
    );
    assert!(
        !text.contains("oz0-direct"),
        "the run wrote to the node's console itself: {text:?}"
    );
}

/// The console's input mode.
fn input_mode() -> Result<u32, String> {
    let mut m = 0u32;
    // SAFETY: this process's stdin handle; `m` is a valid out-pointer.
    if unsafe { GetConsoleMode(std::io::stdin().as_raw_handle(), &mut m) } == 0 {
        return Err("GetConsoleMode failed".into());
    }
    Ok(m)
}

/// As the node on a console: a run given a pseudo console of its own
/// (`for_this_terminal`), which shows a line, reads what is typed and
/// shows it back; the console's input is raw meanwhile and set back after.
fn node_gives_its_run_a_console() -> Result<(), String> {
    console_streams()?;
    let before = input_mode()?;
    let pc = PseudoConsole::for_this_terminal().map_err(|e| e.to_string())?;
    let during = input_mode()?;
    if during & ENABLE_LINE_INPUT != 0 || during & ENABLE_VIRTUAL_TERMINAL_INPUT == 0 {
        return Err(format!(
            "the console's input is not raw VT input: {during:#x}"
        ));
    }
    let child = create_suspended(&Spawn {
        program: &cmd(),
        command_line:
            "cmd.exe /c echo inner-ready >CON & set /p V=<CON & call echo inner-got-%V% >CON",
        cwd: &system_root(),
        env_block: &env_block(&[]),
        std: None,
        pseudo_console: Some(pc.handle()),
        security_env: None,
    })
    .map_err(|e| e.to_string())?;
    child.resume().map_err(|e| e.to_string())?;
    match wait_for(child.process.as_handle(), None, Some(60_000)) {
        Ok(Woke::Exited(_)) => {}
        other => return Err(format!("the run did not end: {other:?}")),
    }
    drop(child);
    drop(pc);
    let after = input_mode()?;
    if after != before {
        return Err(format!(
            "the console's input mode was not set back: {before:#x} before, {after:#x} after"
        ));
    }
    Ok(())
}

#[test]
fn a_run_from_a_terminal_gets_a_console_of_its_own() {
    let name = "a_run_from_a_terminal_gets_a_console_of_its_own";
    if node_part(name, node_gives_its_run_a_console) {
        return;
    }
    let text = as_node(name, |sink, keys| {
        assert!(sink.shows("inner-ready"), "{:?}", sink.text());
        for k in b"typed-in\r" {
            keys.send(*k).unwrap();
        }
        assert!(sink.shows("inner-got-typed-in"), "{:?}", sink.text());
    });
    assert!(text.contains("inner-got-typed-in"), "{text:?}");
}
