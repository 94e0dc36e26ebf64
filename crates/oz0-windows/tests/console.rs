//! No run is given the node's console (Windows, under Wine in CI): a
//! stream that is the console reaches the run as a pipe the node carries,
//! and a run without a pseudo console of its own gets a hidden console,
//! so that what it writes to `CON` (or types into `CONIN$`) never reaches
//! the node's. The test starts itself again as the node, on a pseudo
//! console whose output it reads.
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
use std::sync::{Arc, Mutex};
use windows_sys::Win32::System::Console::{
    SetStdHandle, COORD, STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
};

/// The variable that makes this test binary the node on a console.
const AS_NODE: &str = "OZ0_TEST_CONSOLE_NODE";

/// As the node on a console: its streams are the console's (as a node's
/// started from a terminal), and its run writes one line to its stdout
/// and one to `CON`. What went wrong, if anything.
fn node_on_a_console() -> Result<(), String> {
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
    println!("oz0-node-done");
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

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_run_writes_to_the_console_only_through_the_node() {
    if std::env::var_os(AS_NODE).is_some() {
        let r = node_on_a_console();
        if let Err(e) = &r {
            println!("oz0-node-failed: {e}");
        }
        // A console loses what it was still to draw when its process
        // ends: the test's key ends it once it has been read.
        let _ = std::io::stdin().read_line(&mut String::new());
        r.unwrap();
        return;
    }
    let sink = Sink::default();
    let (keys, rx) = std::sync::mpsc::channel::<u8>();
    let keys_in = Keys(rx);
    let pc = PseudoConsole::open(COORD { X: 120, Y: 40 }, keys_in, sink.clone()).unwrap();
    let me = std::env::current_exe().unwrap();
    let me = me.to_str().unwrap();
    let node = create_suspended(&Spawn {
        program: me,
        command_line: &format!(
            "\"{me}\" a_run_writes_to_the_console_only_through_the_node --exact --nocapture"
        ),
        cwd: &system_root(),
        env_block: &env_block(&[(AS_NODE, "1")]),
        std: None,
        pseudo_console: Some(pc.handle()),
        security_env: None,
    })
    .unwrap();
    node.resume().unwrap();
    let start = std::time::Instant::now();
    let shown = || String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    while !shown().contains("oz0-node-") && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Everything up to the node's last line is drawn by now.
    std::thread::sleep(Duration::from_millis(300));
    keys.send(b'\r').unwrap();
    let woke = wait_for(node.process.as_handle(), None, Some(60_000));
    assert!(matches!(woke, Ok(Woke::Exited(_))), "{woke:?}");
    drop(pc);
    let text = String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    assert!(
        !text.contains("oz0-node-failed"),
        "the node's run failed: {text:?}"
    );
    assert!(
        text.contains("oz0-node-done"),
        "the node did not finish: {text:?}"
    );
    assert!(
        text.contains("oz0-carried"),
        "the run's stdout did not reach the console: {text:?}"
    );
    assert!(
        !text.contains("oz0-direct"),
        "the run wrote to the node's console itself: {text:?}"
    );
}
