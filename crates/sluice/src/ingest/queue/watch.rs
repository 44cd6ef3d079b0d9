//! Wake-ups for the landing directory: file-system notifications (inotify
//! on Linux, through the `notify` crate) end the dispatcher's idle wait as
//! soon as a file arrives, so `poll_ms` only bounds how late a file can be
//! seen where notifications do not reach — NFS and other network
//! filesystems deliver no events for changes made on other hosts, which is
//! why polling always stays on.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;

/// A running watch of one landing directory.
pub struct LandingWatch {
    // Dropping the watcher stops the notifications.
    _watcher: notify::RecommendedWatcher,
    wake: Arc<Notify>,
    settle: Duration,
}

impl std::fmt::Debug for LandingWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LandingWatch").field("settle", &self.settle).finish()
    }
}

/// Whether an event may mean a new file to claim: a file created, renamed
/// in or written under a table folder — not the queue's own moves under
/// `.sluice/`, nor writers' hidden temporary files.
fn worth_waking(landing: &Path, event: &notify::Event) -> bool {
    let kind = matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_));
    kind && event.paths.iter().any(|p| {
        p.strip_prefix(landing).is_ok_and(|rel| {
            !rel.components().any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
        })
    })
}

impl LandingWatch {
    /// Watch `landing` (recursively). `None`, with a note in the log, when
    /// the platform or the filesystem refuses: polling still works.
    pub fn start(landing: &Path, settle: Duration) -> Option<LandingWatch> {
        let wake = Arc::new(Notify::new());
        let notify = wake.clone();
        let root = landing.to_path_buf();
        let handler = move |event: notify::Result<notify::Event>| match event {
            Ok(event) if worth_waking(&root, &event) => notify.notify_one(),
            Ok(_) => {}
            // An overflowed or failed watch: wake up and scan, to be safe.
            Err(_) => notify.notify_one(),
        };
        let started = notify::recommended_watcher(handler)
            .and_then(|mut w| w.watch(landing, RecursiveMode::Recursive).map(|()| w));
        match started {
            Ok(watcher) => Some(LandingWatch { _watcher: watcher, wake, settle }),
            Err(e) => {
                tracing::info!(
                    landing = %landing.display(),
                    error = %e,
                    "no file-system notifications; polling only"
                );
                None
            }
        }
    }

    /// Wait until a file may be ready, or `poll` has passed. After a
    /// notification it waits the settle time too: a file is claimed only
    /// once it has stopped changing, and no further event may come to say so.
    pub async fn wait(&self, poll: Duration) -> bool {
        tokio::select! {
            () = self.wake.notified() => {
                tokio::time::sleep(self.settle.min(poll) + Duration::from_millis(5)).await;
                true
            }
            () = tokio::time::sleep(poll) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_arriving_ends_the_wait_long_before_the_poll_interval() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("trips/.sluice")).unwrap();
        let Some(watch) = LandingWatch::start(dir.path(), Duration::from_millis(10)) else {
            panic!("inotify is available on Linux");
        };
        // The queue's own moves and hidden files wake nobody.
        std::fs::write(dir.path().join("trips/.part.tmp"), "x").unwrap();
        let quiet =
            tokio::time::timeout(Duration::from_millis(300), watch.wait(Duration::from_secs(60)));
        assert!(quiet.await.is_err(), "woken by a hidden file");
        let landing = dir.path().join("trips/a.csv");
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::fs::rename(landing.with_file_name(".part.tmp"), landing).unwrap();
        });
        let clock = std::time::Instant::now();
        assert!(watch.wait(Duration::from_secs(60)).await, "woken by the notification");
        assert!(clock.elapsed() < Duration::from_secs(5), "{:?}", clock.elapsed());
        writer.await.unwrap();
    }
}
