//! A real memory limit for one child process: a memory cgroup of its own,
//! as SLURM's `--mem` or a container gives a job. The kernel kills the
//! child when the group outgrows the limit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A memory cgroup (v1 or v2) below this process's own, removed on drop.
pub(crate) struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// A group limited to `mib` MiB, or why this machine cannot make one.
    pub(crate) fn new(mib: u64) -> Result<MemoryCgroup, String> {
        let groups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let name = format!("sluice-test-{}-{}", std::process::id(), unique());
        for line in groups.lines() {
            let mut f = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let path = path.trim_start_matches('/');
            let (base, limit_file) = if controllers.split(',').any(|c| c == "memory") {
                (Path::new("/sys/fs/cgroup/memory").join(path), "memory.limit_in_bytes")
            } else if id == "0" && controllers.is_empty() {
                let v2 = Path::new("/sys/fs/cgroup").join(path);
                if !v2.join("cgroup.subtree_control").exists() {
                    continue;
                }
                // v2 hands a controller to children only when the parent's
                // subtree enables it.
                let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
                (v2, "memory.max")
            } else {
                continue;
            };
            let dir = base.join(&name);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let group = MemoryCgroup { dir };
            if std::fs::write(group.dir.join(limit_file), (mib << 20).to_string()).is_ok() {
                return Ok(group);
            }
        }
        Err("no writable memory cgroup (cgroup v1 memory controller or v2 memory.max)".into())
    }

    /// Run `command` inside the group.
    pub(crate) fn output(&self, command: &Command) -> Output {
        let procs = self.dir.join("cgroup.procs");
        let mut inside = Command::new("sh");
        inside
            .arg("-c")
            .arg(format!("echo $$ > '{}' && exec \"$0\" \"$@\"", procs.display()))
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(v) => inside.env(key, v),
                None => inside.env_remove(key),
            };
        }
        if let Some(dir) = command.get_current_dir() {
            inside.current_dir(dir);
        }
        inside.output().unwrap()
    }

    /// Start [`peak_mib`](Self::peak_mib) again (where the kernel lets it).
    pub(crate) fn reset_peak(&self) {
        for f in ["memory.max_usage_in_bytes", "memory.peak"] {
            let _ = std::fs::write(self.dir.join(f), "0");
        }
    }

    /// The most memory the group was charged, in MiB.
    pub(crate) fn peak_mib(&self) -> Option<u64> {
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|b| b >> 20)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A group can be removed once its processes are gone.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A group of `mib` MiB, or — where none can be made — `None` after saying
/// so; under CI that is a failure, not a skip.
pub(crate) fn memory_cgroup_or_skip(mib: u64, test: &str) -> Option<MemoryCgroup> {
    match MemoryCgroup::new(mib) {
        Ok(group) => Some(group),
        Err(why) if std::env::var_os("CI").is_some() => panic!("{test} needs {why}"),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}
