//! A pseudo console of its own for a run started from a terminal (ConPTY).
//!
//! A process given the node's own console could type into it
//! (`WriteConsoleInput`): keystrokes the node's shell reads after the run,
//! Windows' form of `TIOCSTI`. A run started from a terminal therefore gets
//! a console of its own ([`PseudoConsole`], `CreatePseudoConsole`) sized as
//! the node's window, and following its size: what the run types goes to that console only, and the
//! node carries bytes between it and the terminal — the terminal's keys in
//! (the node's console set to raw VT input for the run's length, and set
//! back after), the pseudo console's output out.

use std::io::{Read, Write};
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::Console::{
    ClosePseudoConsole, CreatePseudoConsole, GetConsoleMode, GetConsoleScreenBufferInfo,
    ResizePseudoConsole, SetConsoleMode, CONSOLE_MODE, CONSOLE_SCREEN_BUFFER_INFO, COORD,
    DISABLE_NEWLINE_AUTO_RETURN, ENABLE_ECHO_INPUT, ENABLE_LINE_INPUT, ENABLE_PROCESSED_INPUT,
    ENABLE_VIRTUAL_TERMINAL_INPUT, ENABLE_VIRTUAL_TERMINAL_PROCESSING, HPCON,
};
use windows_sys::Win32::System::Pipes::CreatePipe;

use super::last_error;
use crate::launch::SysError;

/// How long a console must write nothing to count as settled.
const QUIET: Duration = Duration::from_millis(250);
/// The longest wait for a console to settle.
const SETTLE_MAX: Duration = Duration::from_secs(3);

/// How often the node's window's size is read, to follow it.
const RESIZE_POLL: Duration = Duration::from_millis(200);

/// Rows and columns when the node's window cannot be read.
const DEFAULT_SIZE: COORD = COORD { X: 80, Y: 25 };

/// Whether `h` is a console's handle.
pub fn is_console(h: &OwnedHandle) -> bool {
    mode_of(h.as_raw_handle()).is_some()
}

/// The mode of the console behind `h`, or None when `h` is not a console.
fn mode_of(h: HANDLE) -> Option<CONSOLE_MODE> {
    let mut mode: CONSOLE_MODE = 0;
    // SAFETY: `h` is a handle of this process (or an invalid one, which the
    // call refuses); `mode` is a valid out-pointer.
    (unsafe { GetConsoleMode(h, &mut mode) } != 0).then_some(mode)
}

/// Whether this process's standard input and output are both a console.
pub fn on_a_terminal() -> bool {
    mode_of(std::io::stdin().as_raw_handle()).is_some()
        && mode_of(std::io::stdout().as_raw_handle()).is_some()
}

/// The node's window's size, in columns and rows.
fn window_size() -> COORD {
    // SAFETY: all-zero is a valid CONSOLE_SCREEN_BUFFER_INFO to fill in.
    let mut info: CONSOLE_SCREEN_BUFFER_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: this process's stdout handle; `info` is a valid out-pointer.
    if unsafe { GetConsoleScreenBufferInfo(std::io::stdout().as_raw_handle(), &mut info) } == 0 {
        return DEFAULT_SIZE;
    }
    let w = info.srWindow;
    let (cols, rows) = (w.Right - w.Left + 1, w.Bottom - w.Top + 1);
    if cols > 0 && rows > 0 {
        COORD { X: cols, Y: rows }
    } else {
        DEFAULT_SIZE
    }
}

/// Joins `t` once it has ended, waiting for that until `until` at most;
/// one still going then is left to end with the node.
pub(super) fn join_by(t: JoinHandle<()>, until: Instant) {
    while !t.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    if t.is_finished() {
        let _ = t.join();
    }
}

/// An anonymous pipe, neither end inheritable: its read and write ends.
pub fn pipe() -> Result<(OwnedHandle, OwnedHandle), SysError> {
    let (mut r, mut w): (HANDLE, HANDLE) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid out-pointers; no security attributes (not inheritable).
    if unsafe { CreatePipe(&mut r, &mut w, std::ptr::null(), 0) } == 0 {
        return Err(SysError {
            code: last_error(),
            message: "CreatePipe failed".into(),
        });
    }
    // SAFETY: two new handles of ours, each owned from here on alone.
    Ok(unsafe {
        (
            OwnedHandle::from_raw_handle(r),
            OwnedHandle::from_raw_handle(w),
        )
    })
}

/// A pseudo console and the threads that carry its bytes. Dropping it
/// closes the console (ending what is still attached), lets the output
/// thread carry what was left, and sets the node's console back.
pub struct PseudoConsole {
    hpc: HPCON,
    output: Option<JoinHandle<()>>,
    /// When the console last wrote, for [`PseudoConsole::settle`].
    last: Arc<Mutex<Instant>>,
    _modes: Option<RawModes>,
    /// Set when the console closes: ends the thread that follows the
    /// node's window's size.
    closing: Arc<AtomicBool>,
    /// That thread, joined before the console closes.
    resizer: Option<JoinHandle<()>>,
}

impl PseudoConsole {
    /// A pseudo console of `size`, fed from `input` and written to `output`
    /// by two threads of its own. The input thread is not joined: it ends
    /// at its next read after the console is closed.
    pub fn open(
        size: COORD,
        input: impl Read + Send + 'static,
        output: impl Write + Send + 'static,
    ) -> Result<PseudoConsole, SysError> {
        let (in_read, in_write) = pipe()?;
        let (out_read, out_write) = pipe()?;
        let mut hpc: HPCON = 0;
        // SAFETY: two live pipe ends of ours, which the call duplicates;
        // `hpc` is a valid out-pointer.
        let hr = unsafe {
            CreatePseudoConsole(
                size,
                in_read.as_raw_handle(),
                out_write.as_raw_handle(),
                0,
                &mut hpc,
            )
        };
        if hr < 0 {
            return Err(SysError {
                #[allow(clippy::cast_sign_loss)]
                code: hr as u32,
                message: "CreatePseudoConsole failed".into(),
            });
        }
        // The console holds its own duplicates: ours go, so that the
        // output ends when it closes.
        drop((in_read, out_write));
        let mut input = input;
        let mut to_console = std::fs::File::from(in_write);
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut input, &mut to_console);
        });
        let mut from_console = std::fs::File::from(out_read);
        let mut output = output;
        let last = Arc::new(Mutex::new(Instant::now()));
        let seen = Arc::clone(&last);
        let out = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = from_console.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = seen.lock() {
                    *t = Instant::now();
                }
                // A terminal that takes no more still has the console
                // drained, so that it never blocks on a full pipe.
                let _ = output.write_all(&buf[..n]);
            }
            let _ = output.flush();
        });
        Ok(PseudoConsole {
            hpc,
            output: Some(out),
            last,
            _modes: None,
            closing: Arc::new(AtomicBool::new(false)),
            resizer: None,
        })
    }

    /// A pseudo console for a run started from this terminal: sized as
    /// the node's window, fed from its keys (its console set to raw VT
    /// input until this is dropped) and written to it.
    pub fn for_this_terminal() -> Result<PseudoConsole, SysError> {
        let modes = RawModes::set()?;
        let size = window_size();
        let mut pc = PseudoConsole::open(size, std::io::stdin(), ConsoleText::new(false))?;
        pc._modes = Some(modes);
        // The console follows the window's size, as a terminal's programs
        // expect (an editor redraws to it).
        let (hpc, closing) = (pc.hpc, Arc::clone(&pc.closing));
        pc.resizer = Some(std::thread::spawn(move || {
            let mut last = size;
            while !closing.load(Ordering::SeqCst) {
                std::thread::sleep(RESIZE_POLL);
                let now = window_size();
                if (now.X, now.Y) != (last.X, last.Y) && !closing.load(Ordering::SeqCst) {
                    // SAFETY: the console is open: it is closed only after
                    // this thread has been joined.
                    unsafe { ResizePseudoConsole(hpc, now) };
                    last = now;
                }
            }
        }));
        Ok(pc)
    }

    /// The console's handle, for `PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE`.
    pub fn handle(&self) -> HPCON {
        self.hpc
    }

    /// Waits until the console has written nothing for [`QUIET`], at most
    /// [`SETTLE_MAX`]: the console draws what its process wrote after the
    /// process ended, and closing it sooner loses that.
    fn settle(&self) {
        let start = Instant::now();
        while start.elapsed() < SETTLE_MAX {
            let quiet = self
                .last
                .lock()
                .map_or(QUIET, |t| t.elapsed())
                .min(start.elapsed());
            if quiet >= QUIET {
                return;
            }
            std::thread::sleep(QUIET - quiet);
        }
    }
}

impl Drop for PseudoConsole {
    fn drop(&mut self) {
        self.settle();
        self.closing.store(true, Ordering::SeqCst);
        if let Some(t) = self.resizer.take() {
            let _ = t.join();
        }
        // SAFETY: created by CreatePseudoConsole, closed once. The output
        // thread keeps reading meanwhile, so the close cannot block on a
        // full pipe.
        unsafe { ClosePseudoConsole(self.hpc) };
        // Its output ends with the console; a console that does not end
        // is left to end with the node.
        if let Some(t) = self.output.take() {
            join_by(t, Instant::now() + SETTLE_MAX);
        }
    }
}

/// The node's console modes, set raw for a run's length and set back on
/// drop.
struct RawModes {
    input: (HANDLE, CONSOLE_MODE),
    output: (HANDLE, CONSOLE_MODE),
}

impl RawModes {
    fn set() -> Result<RawModes, SysError> {
        let i = std::io::stdin().as_raw_handle();
        let o = std::io::stdout().as_raw_handle();
        let not_console = |which: &str| SysError {
            code: last_error(),
            message: format!("GetConsoleMode ({which}) failed: not a console"),
        };
        let im = mode_of(i).ok_or_else(|| not_console("input"))?;
        let om = mode_of(o).ok_or_else(|| not_console("output"))?;
        let raw_in = (im & !(ENABLE_LINE_INPUT | ENABLE_ECHO_INPUT | ENABLE_PROCESSED_INPUT))
            | ENABLE_VIRTUAL_TERMINAL_INPUT;
        let raw_out = om | ENABLE_VIRTUAL_TERMINAL_PROCESSING | DISABLE_NEWLINE_AUTO_RETURN;
        // SAFETY: this process's console handles.
        if unsafe { SetConsoleMode(i, raw_in) } == 0 {
            return Err(SysError {
                code: last_error(),
                message: "SetConsoleMode (raw input) failed".into(),
            });
        }
        let modes = RawModes {
            input: (i, im),
            output: (o, om),
        };
        // SAFETY: as above. A terminal without VT processing still shows
        // text: a refusal here is not an error.
        unsafe { SetConsoleMode(o, raw_out) };
        Ok(modes)
    }
}

impl Drop for RawModes {
    fn drop(&mut self) {
        // SAFETY: this process's console handles, given back their modes.
        unsafe {
            SetConsoleMode(self.input.0, self.input.1);
            SetConsoleMode(self.output.0, self.output.1);
        }
    }
}

/// The node's stdout or stderr for bytes carried to its console: whole
/// UTF-8 only, as a console takes it (`crate::utf8::Carry`).
pub struct ConsoleText {
    carry: crate::utf8::Carry,
    stderr: bool,
}

impl ConsoleText {
    /// To stderr when `stderr`, else to stdout.
    pub fn new(stderr: bool) -> ConsoleText {
        ConsoleText {
            carry: crate::utf8::Carry::default(),
            stderr,
        }
    }
}

impl Write for ConsoleText {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = self.carry.push(buf);
        if !text.is_empty() {
            if self.stderr {
                std::io::stderr().lock().write_all(text.as_bytes())?;
            } else {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::windows::io::AsHandle;
    use std::sync::mpsc::{channel, Receiver, Sender};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }

        /// Waits until the console has shown `what`, at most 30 s.
        fn shows(&self, what: &str) -> bool {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if self.text().contains(what) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        }
    }

    /// Keys typed by the test, when it chooses.
    struct Keys(Receiver<Vec<u8>>);

    impl Read for Keys {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.recv() {
                Ok(k) => {
                    let n = k.len().min(buf.len());
                    buf[..n].copy_from_slice(&k[..n]);
                    Ok(n)
                }
                Err(_) => Ok(0),
            }
        }
    }

    /// `cmd.exe /c LINE` on a new pseudo console: the console's output,
    /// the keys' sender, the console and the process.
    fn on_a_console(
        line: &str,
    ) -> (
        Sink,
        Sender<Vec<u8>>,
        PseudoConsole,
        super::super::spawn::Suspended,
    ) {
        let sink = Sink::default();
        let (keys, rx) = channel();
        let pc = PseudoConsole::open(DEFAULT_SIZE, Keys(rx), sink.clone()).unwrap();
        let root = std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\windows".into());
        let cmd = format!("{root}\\system32\\cmd.exe");
        let env = crate::env::environment_block(&[crate::env::WinVar {
            name: "SystemRoot".into(),
            value: root.clone(),
        }]);
        let child = super::super::spawn::create_suspended(&super::super::spawn::Spawn {
            program: &cmd,
            command_line: &format!("cmd.exe /c {line}"),
            cwd: &root,
            env_block: &env,
            std: None,
            pseudo_console: Some(pc.handle()),
            security_env: None,
        })
        .unwrap();
        child.resume().unwrap();
        (sink, keys, pc, child)
    }

    fn ends(child: &super::super::spawn::Suspended) {
        let woke = super::super::run::wait_for(child.process.as_handle(), None, Some(30_000));
        assert!(
            matches!(woke, Ok(crate::supervise::Woke::Exited(_))),
            "{woke:?}"
        );
    }

    /// A process created on a pseudo console, with no standard handle
    /// given, writes to that console (`CON`), and what it writes reaches
    /// the console's reader; what is typed reaches the process.
    #[test]
    fn a_child_on_its_pseudo_console_writes_and_reads_there() {
        let (sink, keys, pc, child) = on_a_console(
            "echo oz0-on-its-console >CON & set /p V=<CON & call echo got-%V% >CON & set /p W=<CON",
        );
        assert!(sink.shows("oz0-on-its-console"), "{:?}", sink.text());
        keys.send(b"typed-in\r".to_vec()).unwrap();
        assert!(sink.shows("got-typed-in"), "{:?}", sink.text());
        keys.send(b"\r".to_vec()).unwrap();
        ends(&child);
        drop(pc);
    }

    /// Closing the console ends what is still attached to it.
    #[test]
    fn closing_the_console_ends_its_process() {
        let (sink, _keys, pc, child) = on_a_console("echo waiting >CON & set /p W=<CON");
        assert!(sink.shows("waiting"), "{:?}", sink.text());
        drop(pc);
        ends(&child);
    }
}
