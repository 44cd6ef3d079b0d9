//! The `sluice` binary: argument parsing and one call into the library.

fn main() -> std::process::ExitCode {
    sluice_cli::main_entry()
}
