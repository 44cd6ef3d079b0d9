//! This machine and this process: host name, unique ids, owner strings.
//!
//! Several parts of sluice name the process that did something (a worker, a
//! committer) and mint ids nobody else can mint (run ids, commit tokens).
//! They all come from here, the bottom of the module graph.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

mod memory;
pub mod mounts;

pub use memory::{Ceiling, group_rss, memory_ceiling, memory_limit};

/// This machine's host name, read once.
pub fn hostname() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_owned()
    })
}

/// The cores this process may use, read once (std reads the cgroup's
/// quota files on every call: four opens, which a step commit of one run
/// paid each time).
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Threads for work that mostly waits on reads (random blocks of sidecars
/// not in the page cache): more than the cores, so the device has several
/// reads to serve at once.
pub const IO_THREADS: usize = 8;

/// `f` over every item on the process's cores (at most 8), results in
/// item order. Each thread takes the next unclaimed item, so items of very
/// different cost (a sidecar of one key beside one of a million) spread
/// evenly. A panic in `f` is resumed on the caller.
pub fn on_cores<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    on_threads(items, cores().min(8), f)
}

/// [`on_cores`] within a budget: items are taken in order, and once the
/// `weight` of the results so far reaches `budget`, the items not yet taken
/// are left (`None`), always a suffix of `items`. The first item always
/// runs, and results under way when the budget is reached finish, so at
/// most one result per thread goes past it.
pub fn on_cores_within<T: Sync, R: Send>(
    items: &[T],
    budget: u64,
    f: impl Fn(&T) -> R + Sync,
    weight: impl Fn(&R) -> u64 + Sync,
) -> Vec<Option<R>> {
    let used = AtomicU64::new(0);
    let (used, f, weight) = (&used, &f, &weight);
    let taken = AtomicUsize::new(0);
    let taken = &taken;
    let out = on_cores(items, move |item| {
        let i = taken.fetch_add(1, Ordering::SeqCst);
        if i > 0 && used.load(Ordering::SeqCst) >= budget {
            return None;
        }
        let result = f(item);
        used.fetch_add(weight(&result), Ordering::SeqCst);
        Some(result)
    });
    // Threads take items in order but may finish out of order: keep only a
    // prefix, so what is left is a suffix (a run never goes ahead of one
    // before it).
    let first_left = out.iter().position(Option::is_none).unwrap_or(out.len());
    out.into_iter().enumerate().map(|(i, r)| if i < first_left { r } else { None }).collect()
}

/// [`on_cores`] on up to `threads` threads, for work that waits on reads.
pub fn on_threads<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if items.len() <= 1 || threads <= 1 {
        // (A thread costs more than one small item: a step commit of one run.)
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let (f, next) = (&f, &next);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(items.len()))
            .map(|_| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { return out };
                        out.push((i, f(item)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(results) => results,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// A fresh id no other call, process or host produces (32 hex characters):
/// BLAKE3 of the host, pid, time and a process-wide counter.
pub fn unique_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    hasher.update(&now.as_nanos().to_le_bytes());
    hasher.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.update(hostname().as_bytes());
    crate::artifact::id::hex(&hasher.finalize().as_bytes()[..16])
}

/// Who this process is: `machine:pid:start`, where start is the process
/// start time in clock ticks since boot, so a reused pid is told apart, and
/// machine is the hostname with this boot's id and the pid namespace
/// (`host+boot+pidns`; it is also part of file names, so no `/`): two containers, or two nodes, that share a hostname
/// never take each other's processes for their own.
pub fn owner() -> String {
    let pid = std::process::id();
    format!("{}:{pid}:{}", machine(), process_start(pid).unwrap_or(0))
}

/// This machine as an owner names it: hostname, boot id (first 8 hex
/// digits) and pid namespace, those the system tells.
pub fn machine() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().chars().filter(char::is_ascii_hexdigit).take(8).collect::<String>())
        .unwrap_or_default();
    let pid_ns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("pid:[")?.strip_suffix(']').map(str::to_owned)
        })
        .unwrap_or_default();
    format!("{}+{boot}+{pid_ns}", hostname())
}

fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields start after it.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process an [`owner`] string names is certainly gone: it ran
/// on this machine — same hostname, boot and pid namespace — and no process
/// with its pid and start time exists. Owners on other machines are never
/// declared dead here (callers judge them by age); nor are owners written
/// before owners named the boot and namespace, which only a hostname would
/// tell apart.
pub fn owner_is_dead(owner: &str) -> bool {
    let mut parts = owner.rsplitn(3, ':');
    let (Some(start), Some(pid), Some(machine_of)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    if machine_of != machine() {
        return false;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    process_start(pid) != Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_of_this_host_are_alive_or_dead_by_pid_and_start() {
        let me = owner();
        assert!(!owner_is_dead(&me), "{me}");
        let here = machine();
        assert!(owner_is_dead(&format!("{here}:{}:1", std::process::id())), "start time differs");
        assert!(owner_is_dead(&format!("{here}:4194303:5")), "no such pid");
        assert!(!owner_is_dead("another-host:1:1"), "other hosts are judged by age");
        assert!(!owner_is_dead("garbage"));
    }

    #[test]
    fn a_shared_hostname_is_not_a_shared_machine() {
        // Another container (pid namespace) or node (boot) with this
        // hostname: its pids are not ours to judge, however dead they look.
        let host = hostname();
        let here = machine();
        let (boot, ns) = here
            .strip_prefix(&format!("{host}+"))
            .and_then(|rest| rest.split_once('+'))
            .expect("host+boot+pidns");
        for other in [format!("{host}+{boot}+1"), format!("{host}+00000000+{ns}"), host.to_string()]
        {
            assert_ne!(other, here);
            assert!(!owner_is_dead(&format!("{other}:4194303:5")), "{other}");
        }
    }

    #[test]
    fn on_cores_within_a_budget_runs_a_prefix_and_leaves_a_suffix() {
        let items: Vec<u64> = (0..40).collect();
        let out = on_cores_within(&items, 10, |i| *i, |_| 3);
        let ran = out.iter().take_while(|r| r.is_some()).count();
        // 10 units at 3 each: at least 4 items, at most one more per thread.
        assert!((4..=4 + cores().min(8)).contains(&ran), "{ran}");
        assert!(out[ran..].iter().all(Option::is_none), "a suffix is left");
        assert!(out[..ran].iter().enumerate().all(|(i, r)| *r == Some(i as u64)), "in order");
        // The first item runs whatever the budget.
        assert_eq!(on_cores_within(&items, 0, |i| *i, |_| 1)[0], Some(0));
    }

    #[test]
    fn unique_ids_are_unique() {
        let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| unique_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|i| i.len() == 32));
    }

    #[test]
    fn on_cores_runs_each_item_once_and_keeps_their_order() {
        let calls = AtomicUsize::new(0);
        // Uneven costs: one item far slower than the rest.
        let items: Vec<u64> = (0..200).collect();
        let out = on_cores(&items, |&i| {
            calls.fetch_add(1, Ordering::Relaxed);
            if i == 3 {
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            i * 2
        });
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(calls.load(Ordering::Relaxed), items.len());
        assert_eq!(on_cores(&[] as &[u64], |&i| i), Vec::<u64>::new());
    }
}
