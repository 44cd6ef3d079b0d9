//! `sluice restore` killed with SIGKILL at many moments: after `sluice
//! recover` the lake is either untouched (the kill came before the restore
//! was journaled) or exactly the lake an uninterrupted restore produces —
//! which is the lake as of the target version — never a mix.

use std::time::Instant;

use sluice::query::AsOf;

use crate::Lake;
use crate::crash::{
    TABLES, check_journal, copy_dir, dump, dump_at, fraction, kill_after, kill_command_after,
    new_lake, stage_mixed,
};

fn trials() -> u64 {
    std::env::var("SLUICE_RESTORE_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(30)
}

/// A pause before each table's restore (a test hook of `sluice restore`),
/// so the kills below land between table commits, not only before or after.
const PAUSE_MS: &str = "300";

/// Whether the journal holds a completed restore.
fn restored(root: &std::path::Path) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let journal = sluice::lake::journal::read(root, None).await.unwrap();
        journal
            .entries
            .iter()
            .any(|e| e.is_restore() && e.phase() == sluice::lake::journal::Phase::Completed)
    })
}

/// `kill_after` with the pause hook set.
fn kill_after_env(lake: &Lake, args: &[&str], delay: std::time::Duration) -> bool {
    let mut command = lake.command(args);
    command.env("SLUICE_RESTORE_PAUSE_MS", PAUSE_MS);
    kill_command_after(command, delay)
}

#[test]
fn restore_killed_at_random_moments_then_recover_is_all_or_nothing() {
    // Four lake versions, every kind of artifact; the restore goes back to 2.
    let template = new_lake();
    let files = template.root.join("referenced-files");
    for (step, seed) in [(1, 42), (2, 43), (3, 44), (1, 45)] {
        stage_mixed(&template, &files, 120, 1, 0.0, seed, step, 1);
        template.ok(&["commit"]);
    }
    let before = dump(&template.root);
    let as_of_two = dump_at(&template.root, Some(AsOf::Lake(2)));
    assert_ne!(before.0, as_of_two.0);

    // The reference: an uninterrupted restore equals reading as of 2.
    let reference = Lake::new();
    copy_dir(&template.root, &reference.root);
    let started = Instant::now();
    let plan = reference.ok(&["restore", "--to", "2", "--dry-run"]);
    assert!(plan.contains("metrics"), "{plan}");
    let out = reference
        .command(&["restore", "--to", "2"])
        .env("SLUICE_RESTORE_PAUSE_MS", PAUSE_MS)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let full = started.elapsed();
    let after = dump(&reference.root);
    assert_eq!(after.1, 0);
    for (i, (table, _)) in TABLES.iter().enumerate() {
        assert!(after.0[i] == as_of_two.0[i], "`{table}` after restore differs from --as-of 2");
    }
    let history = reference.ok(&["history", "--json"]);
    assert!(history.contains("restore to lake version 2"), "{history}");

    let n = trials();
    let mut finished_by_recover = 0;
    for trial in 0..n {
        let lake = Lake::new();
        copy_dir(&template.root, &lake.root);
        // Kill somewhere in the second half of the run, where the tables
        // are restored one after the other.
        let delay = full.mul_f64(0.5 + fraction(trial + 5000) * 0.5);
        let killed = kill_after_env(&lake, &["restore", "--to", "2"], delay);
        let was_restored = restored(&lake.root);
        if trial % 4 == 0 {
            kill_after(&lake, &["recover"], full.mul_f64(fraction(trial + 7000) * 0.5));
        }
        lake.ok(&["recover"]);
        let got = dump(&lake.root);
        assert_eq!(got.1, 0, "trial {trial}: duplicate keys");
        let expected = if restored(&lake.root) { &after } else { &before };
        for (i, (table, _)) in TABLES.iter().enumerate() {
            assert!(
                got.0[i] == expected.0[i],
                "trial {trial}: `{table}` is neither the restored nor the original lake (delay {delay:?})"
            );
        }
        check_journal(&lake.root, trial);
        if killed && !was_restored && restored(&lake.root) {
            finished_by_recover += 1;
        }
    }
    assert!(
        finished_by_recover >= 20.min(n),
        "at least 20 kills landed mid-restore and recover finished them: {finished_by_recover}/{n}"
    );
}
