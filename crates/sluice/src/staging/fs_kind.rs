//! Is a path on a shared (network or parallel) filesystem?
//!
//! On NFS, Lustre, GPFS, BeeGFS or CIFS a file written on one node is not
//! guaranteed visible on another until it is flushed, so staging fsyncs every
//! file and then its directory there. On a local disk that is wasted I/O and
//! is skipped. The answer comes from the mount table (the longest mount point
//! that contains the path), or is forced by configuration.

use std::path::Path;

/// Filesystem types treated as shared.
pub const SHARED_FS_TYPES: [&str; 9] =
    ["nfs", "nfs4", "lustre", "gpfs", "beegfs", "fuse.beegfs", "cifs", "smb3", "smbfs"];

/// How to decide whether to fsync staging files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Detect from the mount table.
    #[default]
    Detect,
    /// Always fsync (treat as shared).
    Always,
    /// Never fsync (treat as local).
    Never,
}

impl SyncPolicy {
    /// Whether files under `path` must be fsynced.
    pub fn should_sync(self, path: &Path) -> bool {
        match self {
            SyncPolicy::Always => true,
            SyncPolicy::Never => false,
            SyncPolicy::Detect => is_shared(path),
        }
    }
}

/// Whether `path` lives on a shared filesystem, per `/proc/self/mounts`.
pub fn is_shared(path: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    fs_type_of(&mounts, &absolute).is_some_and(|t| SHARED_FS_TYPES.contains(&t))
}

/// The filesystem type of the longest mount point containing `path`.
pub fn fs_type_of<'a>(mounts: &'a str, path: &Path) -> Option<&'a str> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _device = fields.next()?;
            let mount_point = fields.next()?.replace("\\040", " ");
            let fs_type = fields.next()?;
            Some((mount_point, fs_type))
        })
        .filter(|(mount_point, _)| path.starts_with(mount_point))
        .max_by_key(|(mount_point, _)| mount_point.len())
        .map(|(_, fs_type)| fs_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
/dev/vda / ext4 rw 0 0
server:/export /shared nfs4 rw 0 0
lustre@tcp:/fs /scratch lustre rw 0 0
/dev/vdb /shared/local xfs rw 0 0
";

    #[test]
    fn longest_mount_point_wins() {
        assert_eq!(fs_type_of(MOUNTS, Path::new("/home/u")), Some("ext4"));
        assert_eq!(fs_type_of(MOUNTS, Path::new("/shared/lake/staging")), Some("nfs4"));
        assert_eq!(fs_type_of(MOUNTS, Path::new("/shared/local/x")), Some("xfs"));
        assert_eq!(fs_type_of(MOUNTS, Path::new("/scratch/run")), Some("lustre"));
        // A prefix that is not a path component does not match.
        assert_eq!(fs_type_of(MOUNTS, Path::new("/sharedx/y")), Some("ext4"));
    }

    #[test]
    fn policy_can_force_either_way() {
        assert!(SyncPolicy::Always.should_sync(Path::new("/tmp")));
        assert!(!SyncPolicy::Never.should_sync(Path::new("/tmp")));
    }
}
