//! `sluice bench` records machine-readable figures: one JSON object per
//! figure, with its baseline, ratio and where it was measured.

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn lookup_put_cache_and_step_commit_print_their_figures_and_append_them_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results/r.jsonl");
    let lake = crate::Lake::at(dir.path().join("a"));
    let results_arg = results.to_str().unwrap();
    let out = lake.ok(&[
        "bench",
        "lookup",
        "--artifacts",
        "3000",
        "--samples",
        "5",
        "--results",
        results_arg,
    ]);
    assert!(out.contains("get on one long-lived lake: median"), "{out}");
    let lookup = lines(&results);
    assert_eq!(lookup.len(), 3, "{lookup:?}");
    assert_eq!(lookup[0]["bench"], "lookup");
    assert_eq!(lookup[0]["goal"], "3");
    assert_eq!(lookup[0]["unit"], "ms");
    assert!(lookup[0]["value"].as_f64().unwrap() > 0.0);
    assert!(lookup[0]["ratio"].as_f64().unwrap() > 0.0);
    assert!(lookup[0]["git_rev"].as_str().unwrap().len() >= 7, "{}", lookup[0]);
    // The same lake again: its artifacts are found by the same ids.
    lake.ok(&["bench", "lookup", "--artifacts", "3000", "--samples", "3"]);
    let err = lake.command(&["bench", "lookup", "--artifacts", "10"]).output().unwrap();
    assert!(!err.status.success(), "a lake of another size is refused");

    let put = crate::Lake::at(dir.path().join("p"));
    let out = put.ok(&["bench", "put", "--count", "30", "--results", results_arg]);
    assert!(out.contains("p99/median"), "{out}");
    let all = lines(&results);
    assert_eq!(all.len(), 6);
    assert_eq!(all[3]["bench"], "put");
    assert_eq!(
        put.ok(&["sql", "--format", "csv", "SELECT count(*) FROM metrics"]).lines().nth(1),
        Some("30"),
        "every put landed"
    );

    // The cache bench checks its own answer (the cached specs it expects).
    let cache = crate::Lake::at(dir.path().join("c"));
    let out = cache.ok(&[
        "bench",
        "cache",
        "--executions",
        "3000",
        "--specs",
        "400",
        "--results",
        results_arg,
    ]);
    assert!(out.contains("cache check: ") && out.contains("of 400 specs cached"), "{out}");
    let all = lines(&results);
    assert_eq!(
        (all.len(), all[6]["bench"].as_str(), all[6]["goal"].as_str()),
        (7, Some("cache"), Some("5"))
    );

    // Step commits go through the committer: every one lands, once.
    let step = crate::Lake::at(dir.path().join("s"));
    let out = step.ok(&["bench", "step-commit", "--count", "20", "--results", results_arg]);
    assert!(out.contains("step-commit: median") && out.contains("p99/median"), "{out}");
    let all = lines(&results);
    assert_eq!((all.len(), all[7]["bench"].as_str()), (10, Some("step-commit")));
    let sql = "SELECT count(*), count(DISTINCT execution_run_id) FROM executions";
    assert_eq!(step.ok(&["sql", "--format", "csv", sql]).lines().nth(1), Some("20,20"));
    let journal = "SELECT count(*) FROM commits WHERE phase = 'completed'";
    assert_eq!(step.ok(&["sql", "--format", "csv", journal]).lines().nth(1), Some("20"));
}
