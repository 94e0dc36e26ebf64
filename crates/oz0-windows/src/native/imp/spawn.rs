//! A process created suspended with exactly the handles it is given: its
//! three standard streams (`STARTF_USESTDHANDLES`), inherited through an
//! explicit list (`PROC_THREAD_ATTRIBUTE_HANDLE_LIST`), so that no other
//! inheritable handle of the node reaches it; and, for PSEC, its security
//! environment as a thread attribute. The caller places it in its job
//! before it resumes it.
//!
//! The streams are inheritable duplicates made for the one call and closed
//! after it: the node's own handles stay not inheritable. A stream the
//! node has not (a service has no console) is `NUL`.

use std::ffi::c_void;
use std::os::windows::io::{AsHandle, AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{DuplicateHandle, DUPLICATE_SAME_ACCESS, HANDLE};
use windows_sys::Win32::System::Threading::{
    CreateProcessW, DeleteProcThreadAttributeList, GetCurrentProcess,
    InitializeProcThreadAttributeList, ResumeThread, UpdateProcThreadAttribute, CREATE_SUSPENDED,
    CREATE_UNICODE_ENVIRONMENT, EXTENDED_STARTUPINFO_PRESENT, LPPROC_THREAD_ATTRIBUTE_LIST,
    PROCESS_INFORMATION, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, STARTF_USESTDHANDLES, STARTUPINFOEXW,
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
/// dropped (after the child is created, which holds its own).
pub struct StdHandles([OwnedHandle; 3]);

impl StdHandles {
    /// The streams of `io`: the node's own, `NUL`, or a file or pipe.
    pub fn new(io: oz0_core::RunIo) -> std::io::Result<StdHandles> {
        Ok(StdHandles([
            inheritable(io.stdin, Which::In)?,
            inheritable(io.stdout, Which::Out)?,
            inheritable(io.stderr, Which::Err)?,
        ]))
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

/// An inheritable duplicate of the stream `s`.
fn inheritable(s: oz0_core::Stdio, which: Which) -> std::io::Result<OwnedHandle> {
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
    let count = u32::from(s.std.is_some()) + u32::from(s.security_env.is_some());
    let mut attrs = Attributes::new(count.max(1))?;
    // Both live on this frame until CreateProcessW has returned.
    let env_handle = s.security_env;
    let inherited = s.std.map(StdHandles::raw);
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
    if let Some([i, o, e]) = inherited {
        si.StartupInfo.dwFlags |= STARTF_USESTDHANDLES;
        si.StartupInfo.hStdInput = i;
        si.StartupInfo.hStdOutput = o;
        si.StartupInfo.hStdError = e;
    }
    let mut command_line = wide(s.command_line);
    let program = wide(s.program);
    let cwd = wide(s.cwd);
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
            CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT,
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
