//! Each VM's own folder under the temp dir, and its record in the node's
//! data directory.
//!
//! `<tmp>/oz0-vm-<id>-<random>/` (short, because unix socket paths are) holds
//! `vmm/` — the only part the monitor's sandbox sees (its sockets, console
//! log and, for smolvm, its data) — and, outside `vmm/`, the VM's egress
//! proxy socket, which only the node reaches. `<data-dir>/microvm/vms/<id>.json`
//! names the folder and the node process that owns it, so a node that died
//! leaves nothing that the next start does not remove.
//!
//! Removal never follows a link: a record is trusted only for a folder of
//! the expected name directly under the temp dir, owned by this user.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The prefix of every VM folder.
pub const DIR_PREFIX: &str = "oz0-vm-";
/// The subfolder the monitor sees.
pub const VMM_SUBDIR: &str = "vmm";

/// A VM record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The VM's id.
    pub id: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The node process that owns it.
    pub pid: u32,
}

/// A VM's folder and record; both removed on drop.
#[derive(Debug)]
pub struct VmDir {
    /// The VM's id (16 hex digits).
    pub id: String,
    /// `<tmp>/oz0-vm-<id>-<random>`.
    pub dir: PathBuf,
    record: PathBuf,
}

fn hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The records' folder.
pub fn records_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("microvm").join("vms")
}

impl VmDir {
    /// Creates a VM's folder under `tmp` and its record under `data_dir`.
    pub fn create(tmp: &Path, data_dir: &Path) -> std::io::Result<VmDir> {
        let id = hex(8);
        let dir = tmp.join(format!("{DIR_PREFIX}{id}-{}", hex(3)));
        let records = records_dir(data_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&records)?;
        let record = records.join(format!("{id}.json"));
        let rec = Record {
            id: id.clone(),
            dir: dir.clone(),
            pid: std::process::id(),
        };
        fs::write(
            &record,
            serde_json::to_vec(&rec).map_err(std::io::Error::other)?,
        )?;
        let made = fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .and_then(|_| {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dir.join(VMM_SUBDIR))
            });
        if let Err(e) = made {
            let _ = fs::remove_file(&record);
            return Err(e);
        }
        Ok(VmDir { id, dir, record })
    }

    /// The part the monitor sees.
    pub fn vmm(&self) -> PathBuf {
        self.dir.join(VMM_SUBDIR)
    }
}

impl Drop for VmDir {
    fn drop(&mut self) {
        remove_vm_folder(&self.dir);
        let _ = fs::remove_file(&self.record);
    }
}

/// Removes a VM folder if it looks like one (right name, a real folder owned
/// by this user); `remove_dir_all` never follows links.
fn remove_vm_folder(dir: &Path) -> bool {
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(DIR_PREFIX) && !n.contains('/'));
    let Ok(m) = fs::symlink_metadata(dir) else {
        return true;
    };
    if !named || !m.is_dir() || m.uid() != rustix::process::getuid().as_raw() {
        return false;
    }
    fs::remove_dir_all(dir).is_ok()
}

fn alive(pid: u32) -> bool {
    // A number beyond an int is no pid: no process of it lives.
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    match pid {
        None => false,
        Some(p) => match rustix::process::test_kill_process(p) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        },
    }
}

/// Removes the folders and records of VMs whose node is gone. Returns the
/// folders removed.
pub fn cleanup_stale(tmp: &Path, data_dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(records_dir(data_dir)) else {
        return removed;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(rec) = fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
        else {
            let _ = fs::remove_file(&path);
            continue;
        };
        if rec.pid == std::process::id() || alive(rec.pid) {
            continue;
        }
        // Only a folder directly under the temp dir is ours to remove.
        if rec.dir.parent() == Some(tmp) && remove_vm_folder(&rec.dir) {
            removed.push(rec.dir.clone());
        }
        let _ = fs::remove_file(&path);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_drop_and_stale() {
        let base = std::env::temp_dir().join(format!("oz0-vmdir-unit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let (tmp, data) = (base.join("tmp"), base.join("data"));
        fs::create_dir_all(&tmp).unwrap();
        let d = VmDir::create(&tmp, &data).unwrap();
        assert!(d.vmm().is_dir());
        let name = d.dir.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("oz0-vm-") && name.len() == 7 + 16 + 1 + 6,
            "{name}"
        );
        let dir = d.dir.clone();
        drop(d);
        assert!(!dir.exists());
        assert_eq!(fs::read_dir(records_dir(&data)).unwrap().count(), 0);

        // A record of a dead node: its folder goes; a link in it is not followed.
        let stale = tmp.join("oz0-vm-00000000deadbeef-000000");
        fs::create_dir_all(stale.join("vmm")).unwrap();
        let outside = base.join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("keep"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, stale.join("vmm/link")).unwrap();
        let rec = Record {
            id: "00000000deadbeef".into(),
            dir: stale.clone(),
            pid: 0x7fff_fff0,
        };
        fs::write(
            records_dir(&data).join("00000000deadbeef.json"),
            serde_json::to_vec(&rec).unwrap(),
        )
        .unwrap();
        // A record naming a folder elsewhere is dropped, the folder kept.
        let rec2 = Record {
            id: "1".into(),
            dir: outside.clone(),
            pid: 0x7fff_fff0,
        };
        fs::write(
            records_dir(&data).join("1.json"),
            serde_json::to_vec(&rec2).unwrap(),
        )
        .unwrap();
        let removed = cleanup_stale(&tmp, &data);
        assert_eq!(removed, vec![stale.clone()]);
        assert!(!stale.exists());
        assert!(outside.join("keep").exists());
        assert_eq!(fs::read_dir(records_dir(&data)).unwrap().count(), 0);
        fs::remove_dir_all(&base).unwrap();
    }
}
