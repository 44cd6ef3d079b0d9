//! `sluice --help` by topic, and an example under each command's help.
//!
//! clap lists subcommands in one flat list; sluice has five kinds of them.
//! The grouped list is generated from the same definitions (names and
//! descriptions), so it cannot drift from them: a command no group names is
//! listed under "Other commands" rather than left out.

use clap::Command;

/// The command groups of `sluice --help`, in order.
const GROUPS: &[(&str, &[&str])] = &[
    (
        "Lake",
        &["init", "put", "show", "get", "sql", "tables", "types", "lineage", "history", "changes"],
    ),
    (
        "Pipeline",
        &[
            "run",
            "check",
            "checks",
            "status",
            "logs",
            "runs",
            "graph",
            "reproduce",
            "ui",
            "commit",
            "recover",
            "demo",
        ],
    ),
    ("Ingestion", &["ingest"]),
    ("Maintenance", &["doctor", "compact", "vacuum", "checkpoint", "restore"]),
    ("Benchmark", &["bench"]),
    ("Shell", &["completions", "man", "help"]),
];

/// One example per command, shown under its `--help`.
const EXAMPLES: &[(&str, &str)] = &[
    ("init", "sluice init --lake ./lake"),
    ("put", "sluice put --type metric --step 3 '{\"loss\": 0.21}'"),
    ("show", "sluice show 5d0c2e9f"),
    ("get", "sluice get 5d0c2e9f -o table.csv"),
    ("sql", "sluice sql --as-of 3 \"SELECT origin_step_number, count(*) FROM metrics GROUP BY 1\""),
    ("tables", "sluice tables --json"),
    ("types", "sluice types"),
    ("lineage", "sluice lineage <ID> --up --depth 2 --format mermaid"),
    ("history", "sluice history --table metrics --limit 5"),
    ("changes", "sluice changes metrics --since 3"),
    ("run", "sluice run pipeline.toml --workers 4"),
    ("check", "sluice check pipeline.toml"),
    ("checks", "sluice checks pipeline.toml --name enough_rows"),
    ("reproduce", "sluice reproduce 5d0c2e9f --into repro --run"),
    ("ui", "sluice ui --port 8080"),
    ("status", "sluice status"),
    ("runs", "sluice runs --limit 5"),
    ("graph", "sluice graph --format html -o run.html"),
    ("commit", "sluice commit --step 2"),
    ("recover", "sluice recover"),
    ("logs", "sluice logs --step square"),
    ("demo", "sluice demo sluice-demo"),
    ("ingest", "sluice ingest run --config lakehouse.toml --watch"),
    ("doctor", "sluice doctor --repair"),
    ("compact", "sluice compact --table metrics --step 3"),
    ("vacuum", "sluice vacuum --dry-run"),
    ("checkpoint", "sluice checkpoint --table index"),
    ("restore", "sluice restore --to 2026-12-01T08:00:00Z --dry-run"),
    ("bench", "sluice bench pipeline --executions 2000 --workers 2"),
    ("completions", "sluice completions zsh > ~/.zfunc/_sluice"),
    ("man", "sluice man | man -l -"),
];

/// `command` with the grouped command list and the examples.
pub(crate) fn with_topics(mut command: Command) -> Command {
    for (name, example) in EXAMPLES {
        command =
            command.mut_subcommand(*name, |sub| sub.after_help(format!("Example:\n  {example}")));
    }
    let listing = grouped(&command);
    command.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{listing}Options:\n{{options}}{{after-help}}"
    ))
}

/// The visible subcommands, by group, as help text.
fn grouped(command: &Command) -> String {
    let visible: Vec<&Command> = command.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    let about = |sub: &Command| sub.get_about().map(|a| a.to_string()).unwrap_or_default();
    let mut out = String::new();
    let mut listed = Vec::new();
    for (group, names) in GROUPS {
        let members: Vec<&&Command> =
            names.iter().filter_map(|n| visible.iter().find(|s| s.get_name() == *n)).collect();
        if members.is_empty() {
            continue;
        }
        out.push_str(&format!("{group} commands:\n"));
        for sub in members {
            out.push_str(&format!("  {:<12} {}\n", sub.get_name(), about(sub)));
            listed.push(sub.get_name());
        }
        out.push('\n');
    }
    let others: Vec<&&Command> =
        visible.iter().filter(|s| !listed.contains(&s.get_name())).collect();
    if !others.is_empty() {
        out.push_str("Other commands:\n");
        for sub in others {
            out.push_str(&format!("  {:<12} {}\n", sub.get_name(), about(sub)));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_command_is_in_a_group_and_has_an_example() {
        let command = <crate::Cli as clap::CommandFactory>::command();
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            assert!(GROUPS.iter().any(|(_, names)| names.contains(&name)), "{name} has no group");
            if name != "help" {
                assert!(EXAMPLES.iter().any(|(n, _)| *n == name), "{name} has no example");
            }
        }
        for (name, example) in EXAMPLES {
            let words = shell_words(example.split(" | ").next().unwrap_or(example));
            let words: Vec<&String> = words.iter().take_while(|w| *w != ">").collect();
            assert_eq!(words.get(1).map(|w| w.as_str()), Some(*name), "{example}");
            if let Err(e) = command.clone().try_get_matches_from(words) {
                panic!("the example of {name} does not parse: {example}: {e}");
            }
        }
    }

    /// Words as a shell splits them (single and double quotes; enough for
    /// the examples).
    fn shell_words(line: &str) -> Vec<String> {
        let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (None, '\'' | '"') => (quote, any) = (Some(c), true),
                (Some(q), c) if c == q => quote = None,
                (None, c) if c.is_whitespace() => {
                    if any || !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                    any = false;
                }
                (_, c) => word.push(c),
            }
        }
        if any || !word.is_empty() {
            words.push(word);
        }
        words
    }
}
