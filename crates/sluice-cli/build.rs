//! Records the git revision the binary is built from, for the bench results
//! and `sluice --version` (`SLUICE_GIT_REV`; "unknown" outside a git
//! checkout), and the build profile (`SLUICE_BUILD_PROFILE`). Asked at run time,
//! git would name whatever the source tree holds by then, not the build.

use std::path::Path;
use std::process::Command;

fn main() {
    let git = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.git");
    // A commit moves HEAD's branch (a loose ref or packed-refs); a
    // checkout moves HEAD itself. Only paths that exist are watched (cargo
    // runs the script again on every build for one that does not).
    println!("cargo:rerun-if-changed=build.rs");
    for watched in ["HEAD", "refs/heads", "packed-refs"] {
        let path = git.join(watched);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let rev = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SLUICE_GIT_REV={rev}");
    // "debug" for the dev profile, "release" for release: `sluice --version`.
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=SLUICE_BUILD_PROFILE={profile}");
}
