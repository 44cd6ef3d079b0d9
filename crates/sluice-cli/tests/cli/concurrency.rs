//! Workers staging while a commit runs on earlier staging: nothing is lost.

use std::time::Duration;

use crate::Lake;

#[test]
fn staging_workers_and_a_committer_run_at_once() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    // Earlier staging, sealed before the commit starts.
    lake.ok(&["bench", "stage", "--executions", "400", "--workers", "2", "--seed", "1"]);
    // Later staging by 2 more worker processes while commits run.
    let mut stager = lake
        .command(&["bench", "stage", "--executions", "600", "--workers", "2", "--seed", "2"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut commits = 0;
    loop {
        let running = stager.try_wait().unwrap().is_none();
        lake.ok(&["commit", "--chunk", "100"]);
        commits += 1;
        if !running {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stager.wait().unwrap().success());
    lake.ok(&["commit"]);
    assert!(commits >= 2, "commits ran while workers staged");
    let n = lake.csv("SELECT count(*) AS n, count(DISTINCT execution_run_id) AS d FROM executions");
    assert_eq!(n, "n,d\n1000,1000\n");
    let n = lake.csv("SELECT count(*) AS n FROM execution_edges");
    assert_eq!(n, "n\n3000\n");
    let left = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap();
    assert!(left.sealed.is_empty() && left.unsealed.is_empty(), "{left:?}");
}

#[test]
fn a_put_during_a_commit_never_duplicates_an_artifact() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    // Staged content drawn from a pool of 16 metrics `{"pool": v}`.
    lake.ok(&[
        "bench",
        "stage",
        "--executions",
        "300",
        "--workers",
        "2",
        "--duplicate-fraction",
        "1.0",
        "--seed",
        "5",
    ]);
    let mut commit = lake
        .command(&["commit", "--chunk", "50"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pool: Vec<String> = (0..16).map(|v| format!("{{\"pool\": {v}}}")).collect();
    let mut args = vec!["put", "--type", "metric", "--step", "1"];
    args.extend(pool.iter().map(String::as_str));
    lake.ok(&args);
    assert!(commit.wait().unwrap().success());
    let counts = lake.csv("SELECT count(*) AS n, count(DISTINCT artifact_id) AS d FROM metrics");
    assert_eq!(counts, "n,d\n16,16\n");
    let counts = lake.csv("SELECT count(*) AS n, count(DISTINCT artifact_id) AS d FROM index");
    assert_eq!(counts, "n,d\n16,16\n");
}
