//! `sluice demo`: a small, real pipeline that needs nothing but the binary.

use std::path::Path;

use anyhow::Context;
use sluice::Lake;
use sluice::pipeline::{Operations, Pipeline};

use crate::output::print;

/// The example: generate tables, transform them with `sh` + `awk`, compute
/// statistics, keep the tables whose statistics pass a predicate.
pub const DEMO_PIPELINE: &str = r#"# A sluice pipeline: steps run in order; each reads earlier steps' outputs.
name = "demo"

# 12 synthetic CSV tables (columns id, x, y, group), one unit of work each.
[[step]]
name = "generate"
operation = "generate_data"
params = { tables = 12, rows = 200, seed = 7 }

# Any program can be a step. It finds its inputs under inputs/<role>/ and
# writes outputs under outputs/<role>/; here: square column x, 3 tables per unit.
[[step]]
name = "square"
operation = "command"
command = ["sh", "-c", """
for f in inputs/table/*.csv; do
  awk -F, -v OFS=, 'NR == 1 { print; next } { $2 = $2 * $2; print }' "$f" > "outputs/table/$(basename "$f")"
done
"""]
inputs = { table = "generate.data" }
outputs = { table = "data" }
batch = { artifacts_per_unit = 3 }

# Column statistics of every squared table (one metric per table).
[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { table = "square.table" }

# Keep the tables whose mean of x² is above 1/3, found through provenance.
[[step]]
name = "keep"
operation = "filter"
inputs = { candidates = "square.table" }
params = { metric = "stats.metrics", where = "x_mean > 0.333" }
"#;

pub async fn demo(dir: &Path, workers: Option<usize>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("pipeline.toml");
    if !file.exists() {
        std::fs::write(&file, DEMO_PIPELINE)
            .with_context(|| format!("writing {}", file.display()))?;
    }
    let root = dir.join("lake");
    let (lake, _) = Lake::init(&root).await?;
    let operations = Operations::linked()?;
    let pipeline = Pipeline::load(&file, &operations, lake.registry())?;
    let report =
        super::pipeline::run_with_progress(&lake, pipeline, operations, None, workers, true)
            .await?;
    let lake_arg = root.display().to_string();
    let file_arg = file.display().to_string();
    let kept = report.steps.last().and_then(|s| s.outputs.get("kept")).copied().unwrap_or(0);
    let text = format!(
        "{}\nkept {kept} tables. Try next:\n  \
         sluice --lake {lake_arg} sql \"SELECT m.artifact_id, m.content FROM metrics m LIMIT 3\"\n  \
         sluice --lake {lake_arg} sql \"SELECT step_name, status, total_count, succeeded_count, duration_seconds FROM steps ORDER BY timestamp\"\n  \
         sluice --lake {lake_arg} show <artifact id>\n  \
         sluice --lake {lake_arg} status\n  \
         sluice --lake {lake_arg} run {file_arg}      # again: everything is cached\n",
        super::pipeline::report_text(&report)
    );
    print(&text)?;
    super::pipeline::finish(&report)
}
