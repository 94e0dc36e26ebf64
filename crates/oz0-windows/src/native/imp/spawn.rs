//! A process created suspended with exactly the handles it is given: its
//! three standard streams (`STARTF_USESTDHANDLES`), inherited through an
//! explicit list (`PROC_THREAD_ATTRIBUTE_HANDLE_LIST`), so that no other
//! inheritable handle of the node reaches it — or, for a run started from
//! a terminal, a pseudo console of its own (`super::conpty`) and no handle
//! at all; and, for PSEC, its security
//! environment as a thread attribute. The caller places it in its job
//! before it resumes it.
//!
//! The streams are inheritable duplicates made for the one call and closed
//! after it: the node's own handles stay not inheritable. A stream the
//! node has not (a service has no console) is `NUL`. The node's console is
//! never one of them (a pipe the node carries is), and a process without
//! a pseudo console of its own is created with a hidden console
//! (`CREATE_NO_WINDOW`), never attached to the node's.

use std::ffi::c_void;
use std::os::windows::io::{AsHandle, AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{DuplicateHandle, DUPLICATE_SAME_ACCESS, HANDLE};
use windows_sys::Win32::System::Console::HPCON;
use windows_sys::Win32::System::Threading::{
    CreateProcessW, DeleteProcThreadAttributeList, GetCurrentProcess,
    InitializeProcThreadAttributeList, ResumeThread, UpdateProcThreadAttribute, CREATE_NO_WINDOW,
    CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, EXTENDED_STARTUPINFO_PRESENT,
    LPPROC_THREAD_ATTRIBUTE_LIST, PROCESS_INFORMATION, PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
    PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE, STARTF_USESTDHANDLES, STARTUPINFOEXW,
};

use super::{last_error, wide};
use crate::launch::SysError;

/// `PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT`: attribute 35, an input
/// (`PROC_THREAD_ATTRIBUTE_INPUT`), whose value is the environment's handle.
const PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT: usize = 35 | 0x0002_0000;

fn sys(call: &str, code: u32) -> SysError {
    SysError {
        code,
        message: format!("{call} failed"),
    }
}

/// A run's three standard streams as inheritable duplicates, closed when
/// dropped (after the child is created, which holds its own), and the
/// threads that carry the node's console to and from them.
pub struct StdHandles([OwnedHandle; 3], Carriers);

impl StdHandles {
    /// The streams of `io`: the node's own, `NUL`, or a file or pipe. A
    /// stream of the node's own that is its console is never handed on:
    /// the run gets a pipe, and a thread of the node carries it to or from
    /// the console (a process holding a console's handle could read its
    /// screen or type into it).
    pub fn new(io: oz0_core::RunIo) -> std::io::Result<StdHandles> {
        let mut carriers = Carriers::default();
        Ok(StdHandles(
            [
                inheritable(io.stdin, Which::In, &mut carriers)?,
                inheritable(io.stdout, Which::Out, &mut carriers)?,
                inheritable(io.stderr, Which::Err, &mut carriers)?,
            ],
            carriers,
        ))
    }

    /// The threads carrying the run's output to the node's console, for
    /// the caller to finish after the run; the handles stay.
    pub fn take_carriers(&mut self) -> Carriers {
        std::mem::take(&mut self.1)
    }

    fn raw(&self) -> [HANDLE; 3] {
        [
            self.0[0].as_raw_handle(),
            self.0[1].as_raw_handle(),
            self.0[2].as_raw_handle(),
        ]
    }
}

#[derive(Clone, Copy)]
enum Which {
    In,
    Out,
    Err,
}

/// The threads carrying a run's output to the node's console.
#[derive(Default)]
pub struct Carriers(Vec<std::thread::JoinHandle<()>>);

impl Carriers {
    /// Waits until each has carried what the run wrote (its pipe ends
    /// when the run's processes are gone), at most `max` in all; one still
    /// going then is left to end with the node.
    pub fn finish(self, max: std::time::Duration) {
        let until = std::time::Instant::now() + max;
        for t in self.0 {
            super::conpty::join_by(t, until);
        }
    }
}

/// A pipe for the run in place of the node's console: the run's end, and
/// a thread carrying the node's end to or from the console.
fn carried(which: Which, carriers: &mut Carriers) -> std::io::Result<OwnedHandle> {
    let (r, w) = super::conpty::pipe()
        .map_err(|e| std::io::Error::other(format!("{} (error {})", e.message, e.code)))?;
    let (r, w) = (std::fs::File::from(r), std::fs::File::from(w));
    match which {
        Which::In => {
            let mut w = w;
            // Not joined: it ends at its next read after the run.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin(), &mut w);
            });
            Ok(OwnedHandle::from(r))
        }
        Which::Out | Which::Err => {
            let mut r = r;
            let mut to = super::conpty::ConsoleText::new(matches!(which, Which::Err));
            carriers.0.push(std::thread::spawn(move || {
                let _ = std::io::copy(&mut r, &mut to);
            }));
            Ok(OwnedHandle::from(w))
        }
    }
}

/// An inheritable duplicate of the stream `s`.
fn inheritable(
    s: oz0_core::Stdio,
    which: Which,
    carriers: &mut Carriers,
) -> std::io::Result<OwnedHandle> {
    let null = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("NUL")
            .map(OwnedHandle::from)
    };
    let source: OwnedHandle = match s {
        oz0_core::Stdio::File(f) => OwnedHandle::from(f),
        oz0_core::Stdio::Null => null()?,
        oz0_core::Stdio::Inherit => {
            let own = match which {
                Which::In => std::io::stdin().as_handle().try_clone_to_owned(),
                Which::Out => std::io::stdout().as_handle().try_clone_to_owned(),
                Which::Err => std::io::stderr().as_handle().try_clone_to_owned(),
            };
            // No console (a service): the child's stream is NUL.
            match own {
                Ok(h) if super::conpty::is_console(&h) => carried(which, carriers)?,
                Ok(h) => h,
                Err(_) => null()?,
            }
        }
    };
    let mut dup: HANDLE = std::ptr::null_mut();
    // SAFETY: this process's pseudo-handle; `source` is a live handle of
    // ours, borrowed for the call; `dup` is a valid out-pointer.
    let ok = unsafe {
        DuplicateHandle(
            GetCurrentProcess(),
            source.as_raw_handle(),
            GetCurrentProcess(),
            &mut dup,
            0,
            1,
            DUPLICATE_SAME_ACCESS,
        )
    };
    if ok == 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new handle of ours, owned from here on alone.
    Ok(unsafe { OwnedHandle::from_raw_handle(dup) })
}

/// What a process is created from.
pub struct Spawn<'a> {
    /// The program's full path.
    pub program: &'a str,
    /// Its whole command line (the program first, quoted as Windows reads it).
    pub command_line: &'a str,
    /// Its current folder.
    pub cwd: &'a str,
    /// A complete UTF-16 environment block.
    pub env_block: &'a [u16],
    /// Its standard streams; None: none given (it inherits no handle).
    pub std: Option<&'a StdHandles>,
    /// A pseudo console to attach it to (its streams are then the
    /// console's; `std` must be None).
    pub pseudo_console: Option<HPCON>,
    /// A PSEC environment to create it in.
    pub security_env: Option<HANDLE>,
}

/// A process created suspended: its handles, closed when dropped.
pub struct Suspended {
    /// The process.
    pub process: OwnedHandle,
    /// Its first thread.
    pub thread: OwnedHandle,
    /// Its process id.
    pub pid: u32,
}

impl Suspended {
    /// Lets its first thread run.
    pub fn resume(&self) -> Result<(), SysError> {
        // SAFETY: the child's main thread handle, ours.
        if unsafe { ResumeThread(self.thread.as_raw_handle()) } == u32::MAX {
            return Err(sys("ResumeThread", last_error()));
        }
        Ok(())
    }
}

/// An attribute list; deleted on drop.
struct Attributes {
    buf: Vec<u8>,
}

impl Attributes {
    /// A list with room for `count` attributes.
    fn new(count: u32) -> Result<Attributes, SysError> {
        let mut size = 0usize;
        // SAFETY: the sizing call: a null list and a valid size pointer.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), count, 0, &mut size) };
        let mut a = Attributes {
            buf: vec![0u8; size],
        };
        // SAFETY: the buffer has the size the sizing call asked for.
        if unsafe { InitializeProcThreadAttributeList(a.list(), count, 0, &mut size) } == 0 {
            // Not initialised: nothing to delete.
            std::mem::forget(a);
            return Err(sys("InitializeProcThreadAttributeList", last_error()));
        }
        Ok(a)
    }

    fn list(&mut self) -> LPPROC_THREAD_ATTRIBUTE_LIST {
        self.buf.as_mut_ptr().cast()
    }

    /// Sets `attr` to the `size` bytes at `value`, which must outlive the
    /// process's creation.
    fn set(
        &mut self,
        attr: usize,
        value: *const c_void,
        size: usize,
        what: &str,
    ) -> Result<(), SysError> {
        // SAFETY: the list is initialised with room for this attribute;
        // the caller keeps `value` alive until CreateProcessW returned.
        let ok = unsafe {
            UpdateProcThreadAttribute(
                self.list(),
                0,
                attr,
                value,
                size,
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ok == 0 {
            return Err(sys(what, last_error()));
        }
        Ok(())
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised by InitializeProcThreadAttributeList, deleted once.
        unsafe { DeleteProcThreadAttributeList(self.list()) };
    }
}

/// Creates the process of `s`, suspended.
pub fn create_suspended(s: &Spawn<'_>) -> Result<Suspended, SysError> {
    if s.std.is_some() && s.pseudo_console.is_some() {
        return Err(SysError {
            code: 0,
            message: "a process takes either its streams or a pseudo console, not both".into(),
        });
    }
    if s.std
        .is_some_and(|h| h.0.iter().any(super::conpty::is_console))
    {
        return Err(SysError {
            code: 0,
            message: "a console's handle is never handed to a run (the node carries it)".into(),
        });
    }
    let count = u32::from(s.std.is_some())
        + u32::from(s.security_env.is_some())
        + u32::from(s.pseudo_console.is_some());
    let mut attrs = Attributes::new(count.max(1))?;
    // All live on this frame until CreateProcessW has returned.
    let env_handle = s.security_env;
    let console = s.pseudo_console;
    let inherited = s.std.map(StdHandles::raw);
    if let Some(c) = &console {
        // The attribute's value is the HPCON itself, not a pointer to it.
        attrs.set(
            PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE as usize,
            *c as *const c_void,
            std::mem::size_of::<HPCON>(),
            "UpdateProcThreadAttribute(PSEUDOCONSOLE)",
        )?;
    }
    if let Some(h) = &env_handle {
        attrs.set(
            PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT,
            std::ptr::from_ref(h).cast(),
            std::mem::size_of::<HANDLE>(),
            "UpdateProcThreadAttribute(SECURITY_ENVIRONMENT)",
        )?;
    }
    if let Some(list) = &inherited {
        attrs.set(
            PROC_THREAD_ATTRIBUTE_HANDLE_LIST as usize,
            list.as_ptr().cast(),
            std::mem::size_of_val(list),
            "UpdateProcThreadAttribute(HANDLE_LIST)",
        )?;
    }
    // SAFETY: all-zero is a valid STARTUPINFOEXW before its fields are set.
    let mut si: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
    si.StartupInfo.cb = u32::try_from(std::mem::size_of::<STARTUPINFOEXW>()).unwrap_or(0);
    si.lpAttributeList = attrs.list();
    if console.is_some() {
        // Null streams: the console's own, never the node's (a process
        // whose parent's streams are redirected would otherwise get them).
        si.StartupInfo.dwFlags |= STARTF_USESTDHANDLES;
    }
    if let Some([i, o, e]) = inherited {
        si.StartupInfo.dwFlags |= STARTF_USESTDHANDLES;
        si.StartupInfo.hStdInput = i;
        si.StartupInfo.hStdOutput = o;
        si.StartupInfo.hStdError = e;
    }
    let mut command_line = wide(s.command_line);
    let program = wide(s.program);
    let cwd = wide(s.cwd);
    // Without a pseudo console of its own, a console program gets a
    // hidden one (never the node's, which it could type into).
    let flags = CREATE_SUSPENDED
        | CREATE_UNICODE_ENVIRONMENT
        | EXTENDED_STARTUPINFO_PRESENT
        | if console.is_some() {
            0
        } else {
            CREATE_NO_WINDOW
        };
    // SAFETY: all-zero is a valid PROCESS_INFORMATION to be filled in.
    let mut pi: PROCESS_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: every string is NUL-terminated and outlives the call; the
    // command line is writable as CreateProcessW requires; the block is a
    // complete UTF-16 environment block; `si` carries the attribute list,
    // whose values live on this frame; handles are inherited only with the
    // list, which names exactly the three streams.
    let ok = unsafe {
        CreateProcessW(
            program.as_ptr(),
            command_line.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            i32::from(inherited.is_some()),
            flags,
            s.env_block.as_ptr().cast(),
            cwd.as_ptr(),
            std::ptr::from_ref(&si.StartupInfo),
            &mut pi,
        )
    };
    if ok == 0 {
        return Err(sys("CreateProcessW", last_error()));
    }
    // SAFETY: new handles of ours, each owned from here on alone.
    Ok(unsafe {
        Suspended {
            process: OwnedHandle::from_raw_handle(pi.hProcess),
            thread: OwnedHandle::from_raw_handle(pi.hThread),
            pid: pi.dwProcessId,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_core::{RunIo, Stdio};
    use std::os::windows::io::AsHandle;

    /// What a command given a file as its stdout writes reaches the file.
    #[test]
    fn a_child_writes_to_the_file_it_was_given() {
        let dir = std::env::temp_dir().join(format!("oz0-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.txt");
        let f = std::fs::File::create(&out).unwrap();
        let std = StdHandles::new(RunIo {
            stdin: Stdio::Null,
            stdout: Stdio::File(f),
            stderr: Stdio::Null,
        })
        .unwrap();
        let root = std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\windows".into());
        let cmd = format!("{root}\\system32\\cmd.exe");
        let env = crate::env::environment_block(&[crate::env::WinVar {
            name: "SystemRoot".into(),
            value: root.clone(),
        }]);
        let child = create_suspended(&Spawn {
            program: &cmd,
            command_line: "cmd.exe /c echo oz0-spawned",
            cwd: dir.to_str().unwrap(),
            env_block: &env,
            std: Some(&std),
            pseudo_console: None,
            security_env: None,
        })
        .unwrap();
        drop(std);
        child.resume().unwrap();
        let woke = super::super::run::wait_for(child.process.as_handle(), None, Some(30_000));
        assert!(
            matches!(woke, Ok(crate::supervise::Woke::Exited(_))),
            "{woke:?}"
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(text.trim_end(), "oz0-spawned");
    }
}
