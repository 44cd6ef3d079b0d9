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
    // With --json: the figures on stdout, one JSON object a line, the
    // report on stderr.
    let out = put.command(&["bench", "put", "--count", "5", "--json"]).output().unwrap();
    assert!(out.status.success());
    let (stdout, stderr) =
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8_lossy(&out.stderr));
    let printed: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(printed.len(), 3, "{stdout}");
    assert!(printed.iter().all(|f| f["bench"] == "put" && f["git_rev"].is_string()));
    assert!(stderr.contains("p99/median"), "{stderr}");
    assert_eq!(
        put.ok(&["sql", "--format", "csv", "SELECT count(*) FROM metrics"]).lines().nth(1),
        Some("35"),
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

/// `bench scale` grows a lake in steps, measures at each size (checking
/// every answer it times), and a later run grows the same lake further.
#[test]
fn scale_grows_a_lake_measures_at_each_size_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("r.jsonl");
    let lake = crate::Lake::at(dir.path().join("l"));
    let small = |artifacts: &str, at: &str| {
        vec![
            "bench",
            "scale",
            "--artifacts",
            artifacts,
            "--at",
            at,
            "--commit-size",
            "2000",
            "--executions",
            "40",
            "--specs",
            "200",
            "--samples",
            "2",
            "--results",
            results.to_str().unwrap(),
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>()
    };
    let args = small("6000", "3000,6000");
    let out = lake.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("grew to 3000 artifacts") && out.contains("grew to 6000"), "{out}");
    assert!(out.contains("60 artifacts added"), "half the staged ones are new: {out}");
    let all = lines(&results);
    assert_eq!(all.len(), 12, "six figures per size: {all:?}");
    assert!(all.iter().all(|f| f["bench"] == "scale"));
    // The second size is compared with the first.
    assert!(all[6]["baseline"].as_str().unwrap().contains("first size"), "{}", all[6]);
    let goals: Vec<&str> = all[..6].iter().map(|f| f["goal"].as_str().unwrap()).collect();
    assert_eq!(goals, ["4", "7", "3", "5", "8", "8"]);
    let generated = "SELECT count(*) FROM executions WHERE operation_name = 'scale'";
    assert_eq!(lake.ok(&["sql", "--format", "csv", generated]).lines().nth(1), Some("1200"));

    // Grown on, with the metrics already present drawn from the newest
    // 1000 artifacts (a re-run of recent work), the commit measured three
    // times, each of its own new executions.
    let mut args = small("8000", "8000");
    args.extend(["--recent", "1000", "--commits", "3"].map(str::to_owned));
    let out = lake.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("grew to 8000 artifacts"), "{out}");
    assert!(out.contains("drawn from its newest 1000"), "{out}");
    assert_eq!(out.matches("60 artifacts added").count(), 3, "each commit's new half: {out}");
    assert!(out.contains("3 commits at 8000:") && out.contains("median of 3"), "{out}");
    assert_eq!(lake.ok(&["sql", "--format", "csv", generated]).lines().nth(1), Some("1600"));
    let sql = "SELECT count(*) - count(DISTINCT artifact_id) FROM index";
    assert_eq!(lake.ok(&["sql", "--format", "csv", sql]).lines().nth(1), Some("0"), "no duplicate");
    let unindexed = "SELECT count(*) FROM metrics m WHERE NOT EXISTS \
                     (SELECT 1 FROM \"index\" i WHERE i.artifact_id = m.artifact_id)";
    let bounded = ["sql", "--memory-limit-mib", "64", "--format", "csv", unindexed];
    assert_eq!(lake.ok(&bounded).lines().nth(1), Some("0"), "every metric is indexed");

    let other = crate::Lake::at(dir.path().join("o"));
    other.ok(&["bench", "put", "--count", "3"]);
    let args = small("6000", "6000");
    let refused = other.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).output();
    assert!(!refused.unwrap().status.success(), "a lake the bench did not grow is refused");
}

/// `bench slurm` runs the same steps on both backends and records each
/// step's SLURM time against the local one; where SLURM does not answer it
/// says it skipped and records nothing.
#[test]
fn bench_slurm_compares_the_backends_or_says_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("r.jsonl");
    let lake = crate::Lake::at(dir.path().join("a"));
    let args = ["bench", "slurm", "--units", "40", "--results", results.to_str().unwrap()];
    // No SLURM on PATH: a clear skip, nothing recorded.
    let out = lake.command(&args).env("PATH", dir.path()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("skipped, SLURM is not running here"), "{said}");
    let recorded = std::fs::read_to_string(&results).unwrap_or_default();
    assert!(recorded.is_empty(), "a skipped bench records no figure: {recorded}");
    if !crate::slurm::slurm_available() {
        return;
    }
    let out = lake.ok(&args);
    for step in ["gen", "stats"] {
        assert!(out.contains(&format!("step {step} (40 units): local ")), "{out}");
    }
    let figures = lines(&results);
    let steps: Vec<&serde_json::Value> =
        figures.iter().filter(|f| f["figure"].as_str().unwrap().starts_with("step ")).collect();
    assert_eq!(steps.len(), 2, "{figures:?}");
    for f in steps {
        assert!(f["value"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["ratio"].as_f64().unwrap() > 0.0, "{f}");
        assert_eq!(f["goal"], "45.4", "{f}");
    }
    assert!(!dir.path().join("a.slurm-runs").exists(), "the bench's lakes are removed");
}

#[test]
fn bench_python_compares_a_python_step_with_a_builtin_and_the_seed() {
    let Some(python) = crate::python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("r.jsonl");
    let lake = crate::Lake::at(dir.path().join("lake"));
    let out = lake.ok(&[
        "bench",
        "python",
        "--units",
        "12",
        "--tables",
        "8",
        "--python",
        python.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(out.contains("compute_metrics step") && out.contains("ms more per unit"), "{out}");
    assert!(out.contains("x faster (goal >= 20x)"), "{out}");
    let figures = lines(&results);
    assert_eq!(figures.len(), 2, "{figures:?}");
    assert!(figures.iter().all(|f| f["bench"] == "python" && f["ratio"].as_f64().unwrap() > 0.0));
    assert_eq!(figures[0]["unit"], "ms");
    assert_eq!(figures[1]["goal"], "41.speed.2");
    assert!(!dir.path().join("lake.python-rounds").exists(), "its lakes are removed");
}
