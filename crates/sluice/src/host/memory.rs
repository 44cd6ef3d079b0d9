//! The memory this process may use: its control group's limit.
//!
//! A batch scheduler (SLURM's `--mem`, a Kubernetes pod, `systemd-run -p
//! MemoryMax=`) puts a job in a memory cgroup and kills it when the group
//! outgrows its limit. Bounds that default to a fixed size (a commit's
//! decoded rows) must shrink to fit inside it, or a `recover` under a small
//! limit would be killed on every attempt.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The memory limit of this process's cgroup (the smallest along its path,
/// v1 or v2), read once; `None` when there is none.
pub fn memory_limit() -> Option<u64> {
    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        limit_of(&groups, Path::new("/sys/fs/cgroup"), |p| std::fs::read_to_string(p).ok())
    })
}

/// The most memory this process can ever use: its cgroup's limit, or the
/// machine's memory when that is smaller or there is no limit. A run whose
/// commit would need more is refused before it is loaded, not killed.
pub fn memory_ceiling() -> Option<Ceiling> {
    static CEILING: OnceLock<Option<Ceiling>> = OnceLock::new();
    *CEILING.get_or_init(|| {
        let physical = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| mem_total(&t));
        let group = memory_limit().map(|bytes| Ceiling { bytes, cgroup: true });
        let machine = physical.map(|bytes| Ceiling { bytes, cgroup: false });
        match (group, machine) {
            (Some(g), Some(m)) => Some(if g.bytes <= m.bytes { g } else { m }),
            (g, m) => g.or(m),
        }
    })
}

/// The memory a process can use at most, and where that comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling {
    /// Bytes.
    pub bytes: u64,
    /// A memory cgroup's limit (a SLURM job's `--mem`, a container's);
    /// otherwise the machine's memory.
    pub cgroup: bool,
}

impl std::fmt::Display for Ceiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = self.bytes >> 20;
        if self.cgroup {
            write!(f, "this process's memory limit ({mib} MiB, set by its cgroup)")
        } else {
            write!(f, "this machine's memory ({mib} MiB)")
        }
    }
}

/// The resident memory of every process in process group `pgid`, in
/// bytes (a tool and whatever it started), read from `/proc`.
pub fn group_rss(pgid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut total = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        let in_group = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| process_group(&stat))
            .is_some_and(|group| group == pgid);
        if in_group {
            total += std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|status| vm_rss(&status))
                .unwrap_or(0);
        }
    }
    total
}

/// The process group in a `/proc/<pid>/stat` line (the fifth field; the
/// second, the command, may hold spaces and parentheses).
fn process_group(stat: &str) -> Option<u32> {
    let (_, after) = stat.rsplit_once(')')?;
    after.split_whitespace().nth(2)?.parse().ok()
}

/// `VmRSS` of a `/proc/<pid>/status` text, in bytes.
fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 =
        line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib << 10)
}

/// `MemTotal` of `/proc/meminfo`'s text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 =
        line.trim_start_matches("MemTotal:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib << 10)
}

/// The limit named by `/proc/self/cgroup`'s text `groups`, with the cgroup
/// files under `root` read by `read`.
fn limit_of(groups: &str, root: &Path, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    let mut limits = Vec::new();
    for line in groups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (base, file) = if id == "0" && controllers.is_empty() {
            (root.to_path_buf(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        // Every ancestor's limit applies too.
        let mut dir: PathBuf = base.join(path.trim_start_matches('/'));
        loop {
            if let Some(limit) = read(&dir.join(file)).and_then(|text| parse(&text)) {
                limits.push(limit);
            }
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    limits.into_iter().min()
}

/// A limit file's value: `max` (v2) and v1's "unlimited" (a page-rounded
/// `i64::MAX`) are no limit.
fn parse(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 62).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn reader(files: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let files: BTreeMap<PathBuf, String> =
            files.iter().map(|(p, v)| (PathBuf::from(p), (*v).to_owned())).collect();
        move |p| files.get(p).cloned()
    }

    #[test]
    fn a_v2_limit_is_the_smallest_along_the_path() {
        let read = reader(&[
            ("/cg/memory.max", "max\n"),
            ("/cg/slurm/memory.max", "1073741824\n"),
            ("/cg/slurm/job_7/memory.max", "max\n"),
        ]);
        assert_eq!(limit_of("0::/slurm/job_7\n", Path::new("/cg"), &read), Some(1 << 30));
        assert_eq!(limit_of("0::/\n", Path::new("/cg"), &read), None);
    }

    #[test]
    fn the_machine_s_memory_is_read_from_meminfo() {
        let text = "MemTotal:       24568680 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total(text), Some(24_568_680 << 10));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert!(memory_ceiling().is_some_and(|c| c.bytes > 0), "Linux has /proc/meminfo");
    }

    #[test]
    fn a_group_s_memory_is_read_from_proc() {
        assert_eq!(process_group("12 (a) b) S 1 77 77 0"), Some(77));
        assert_eq!(vm_rss("Name:\tx\nVmRSS:\t   2048 kB\n"), Some(2 << 20));
        // This test's own group holds at least this process.
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        let group = process_group(&own).unwrap();
        assert!(group_rss(group) > 1 << 20);
    }

    #[test]
    fn a_v1_limit_is_read_from_the_memory_controller() {
        let read = reader(&[
            ("/cg/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/cg/memory/job/memory.limit_in_bytes", "209715200\n"),
        ]);
        let groups = "5:cpu,cpuacct:/job\n4:memory:/job\n0::/\n";
        assert_eq!(limit_of(groups, Path::new("/cg"), &read), Some(200 << 20));
        assert_eq!(limit_of("4:memory:/other\n", Path::new("/cg"), &read), None);
        assert_eq!(limit_of("", Path::new("/cg"), &read), None);
    }
}
