//! Progress of long operations, for whoever shows it.
//!
//! The library never draws anything: an operation that works table by table
//! (compaction, vacuum, restore, checkpoints) calls the [`Progress`] it was
//! given before each table and once at the end, and the CLI turns that into
//! a bar on a terminal. The default reports nowhere.

use std::fmt;
use std::sync::Arc;

/// A callback told `(done, total, what starts now)`; `what` is empty when
/// `done == total`.
type Report = dyn Fn(usize, usize, &str) + Send + Sync;

/// Where a long operation reports how far it has come.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<Report>>);

impl Progress {
    /// Report to `f`.
    pub fn new(f: impl Fn(usize, usize, &str) + Send + Sync + 'static) -> Self {
        Progress(Some(Arc::new(f)))
    }

    /// `done` of `total` parts are finished; `starting` begins now.
    pub fn report(&self, done: usize, total: usize, starting: &str) {
        if let Some(f) = &self.0 {
            f(done, total, starting);
        }
    }

    /// Every part of `total` is finished.
    pub fn finish(&self, total: usize) {
        self.report(total, total, "");
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Progress(reported)" } else { "Progress(none)" })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn reports_each_part_then_the_end() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let progress = Progress::new(move |done, total, what| {
            sink.lock().expect("test lock").push(format!("{done}/{total} {what}"));
        });
        progress.report(0, 2, "index");
        progress.clone().report(1, 2, "metric");
        progress.finish(2);
        Progress::default().report(0, 1, "nobody listens");
        assert_eq!(*seen.lock().expect("test lock"), ["0/2 index", "1/2 metric", "2/2 "]);
    }
}
