//! What a valid pipeline still needs of the machine it runs on: the
//! programs its `command` steps start and, for SLURM steps, `sbatch`.
//!
//! These are warnings, not validation errors: a program may exist only on
//! the compute nodes (a module loaded in the job), and the machine that
//! checks a pipeline is not always the one that runs it.

use std::path::Path;

use super::config::BackendKind;
use super::validate::Pipeline;

impl Pipeline {
    /// What this machine lacks to run the pipeline, one sentence each.
    pub fn preflight(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut slurm_steps = Vec::new();
        for step in &self.config.steps {
            if step.backend.unwrap_or(self.config.backend) == BackendKind::Slurm {
                slurm_steps.push(step.name.as_str());
            }
            let Some(program) = step.command.as_ref().and_then(|argv| argv.first()) else {
                continue;
            };
            if program.contains('/') {
                if !Path::new(program).is_file() {
                    out.push(format!("step `{}`: program `{program}` does not exist", step.name));
                }
            } else if !on_path(program) {
                out.push(format!(
                    "step `{}`: program `{program}` is not on PATH here (fine if the nodes that run it have it)",
                    step.name
                ));
            }
        }
        if !slurm_steps.is_empty() && !on_path("sbatch") {
            out.push(format!(
                "steps {} run on SLURM, but `sbatch` is not on PATH here: run the pipeline where SLURM is, or with --backend local",
                slurm_steps.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        out
    }
}

/// Whether `program` names a file in a folder of `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Operations;
    use crate::pipeline::config::PipelineConfig;
    use crate::registry::TypeRegistry;

    fn pipeline(text: &str) -> Pipeline {
        let config = PipelineConfig::parse(text, Path::new("p.toml")).unwrap();
        Pipeline::validate(config, &Operations::linked().unwrap(), &TypeRegistry::builtin())
            .unwrap()
    }

    #[test]
    fn a_missing_program_and_a_missing_sbatch_are_reported() {
        let steps = "[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n\
            [[step]]\nname = \"c\"\noperation = \"command\"\ninputs = { t = \"gen.data\" }\n\
            outputs = { o = \"metric\" }\n";
        let found =
            pipeline(&format!("name = \"t\"\n{steps}command = [\"sh\", \"-c\", \"true\"]\n"));
        assert!(found.preflight().is_empty(), "{:?}", found.preflight());
        let missing = pipeline(&format!(
            "name = \"t\"\n{steps}command = [\"no-such-program-sluice\"]\nbackend = \"slurm\"\n"
        ));
        let said = missing.preflight();
        assert!(said[0].contains("`no-such-program-sluice` is not on PATH"), "{said:?}");
        if !on_path("sbatch") {
            assert!(said[1].contains("`c`") && said[1].contains("`sbatch`"), "{said:?}");
        }
        let path = pipeline(&format!("name = \"t\"\n{steps}command = [\"./nowhere/run.sh\"]\n"));
        assert!(path.preflight()[0].contains("does not exist"), "{:?}", path.preflight());
    }
}
