//! The filesystem a path lives on, read from `/proc/self/mounts`, and what
//! it means for the writer lock.
//!
//! sluice's correctness never rests on its `flock` writer lock (every
//! commit is exactly the next Delta version), but the lock is what keeps
//! two committers on two hosts from doing the same work twice. Some shared
//! filesystems make `flock` host-local — Lustre mounted with `localflock`,
//! NFS with `local_lock=flock|posix|all`, BeeGFS unless global file locks
//! are turned on — so `sluice doctor` says where the lake lives and warns.

use std::path::{Path, PathBuf};

/// One mount: where, what filesystem, with which options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount point.
    pub point: PathBuf,
    /// The filesystem type (`ext4`, `nfs4`, `lustre`, …).
    pub fstype: String,
    /// The device or server export.
    pub source: String,
    /// Mount options.
    pub options: Vec<String>,
}

impl Mount {
    /// Why `flock` on this mount may not be seen by other hosts, if it may
    /// not be.
    pub fn host_local_locks(&self) -> Option<String> {
        let option = |name: &str| self.options.iter().any(|o| o == name);
        let value =
            |name: &str| self.options.iter().find_map(|o| o.strip_prefix(name)?.strip_prefix('='));
        match self.fstype.as_str() {
            "lustre" if option("localflock") => {
                Some("Lustre is mounted with `localflock`: locks are seen by this host only".into())
            }
            "lustre" if !option("flock") => {
                Some("Lustre is mounted without `flock`: locks may be host-local or refused".into())
            }
            "nfs" | "nfs4" => match value("local_lock") {
                Some(kind @ ("flock" | "posix" | "all")) => Some(format!(
                    "NFS is mounted with `local_lock={kind}`: locks are seen by this host only"
                )),
                _ => None,
            },
            "beegfs" => Some(
                "BeeGFS keeps file locks on each host unless every client sets \
                 `tuneUseGlobalFileLocks=true`"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// The mount holding `path` (its longest mount point), from this
/// process's mount table.
pub fn mount_of(path: &Path) -> Option<Mount> {
    let table = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let path = std::fs::canonicalize(path).ok()?;
    find(&table, &path)
}

/// The mount of `path` in a mount table's text.
fn find(table: &str, path: &Path) -> Option<Mount> {
    table
        .lines()
        .filter_map(parse_line)
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())
}

/// A line of `/proc/mounts`: source, point, type, options (spaces in
/// paths are written `\040`).
fn parse_line(line: &str) -> Option<Mount> {
    let mut fields = line.split_whitespace();
    let (source, point, fstype, options) =
        (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    Some(Mount {
        point: PathBuf::from(point.replace("\\040", " ")),
        fstype: fstype.to_owned(),
        source: source.to_owned(),
        options: options.split(',').map(str::to_owned).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
/dev/sda1 / ext4 rw,relatime 0 0
server:/export /scratch nfs4 rw,vers=4.2,local_lock=none 0 0
server:/home /home nfs rw,vers=3,local_lock=all 0 0
mds@tcp:/lustre /lustre lustre rw,localflock 0 0
mds@tcp:/lfs2 /lfs2 lustre rw,flock 0 0
beegfs_nodev /mnt/beegfs beegfs rw,cfgFile=/etc/beegfs/beegfs-client.conf 0 0
/dev/sdb1 /data\\040disk ext4 rw 0 0
";

    #[test]
    fn the_longest_mount_point_holds_a_path() {
        let at = |p: &str| find(TABLE, Path::new(p)).unwrap();
        assert_eq!(at("/scratch/lake").fstype, "nfs4");
        assert_eq!(at("/srv/lake").point, PathBuf::from("/"));
        assert_eq!(at("/data disk/lake").point, PathBuf::from("/data disk"));
        assert_eq!(at("/home/me/lake").source, "server:/home");
    }

    #[test]
    fn host_local_locks_are_named_by_filesystem_and_option() {
        let warn = |p: &str| find(TABLE, Path::new(p)).unwrap().host_local_locks();
        assert_eq!(warn("/srv/lake"), None);
        assert_eq!(warn("/scratch/lake"), None, "local_lock=none shares locks");
        assert!(warn("/home/lake").unwrap().contains("local_lock=all"));
        assert!(warn("/lustre/lake").unwrap().contains("localflock"));
        assert_eq!(warn("/lfs2/lake"), None, "Lustre with flock shares locks");
        assert!(warn("/mnt/beegfs/lake").unwrap().contains("tuneUseGlobalFileLocks"));
    }
}
