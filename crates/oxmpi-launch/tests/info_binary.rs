//! The built `oxmpi-info` binary, run with a controlled environment.

use std::process::{Command, Output};

fn oxmpi_info(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxmpi-info"));
    // No stray OXMPI_MCA_* from the CI environment, and no parameter files.
    cmd.env_clear()
        .env("OXMPI_MCA_PARAM_FILES", "")
        .envs(env.iter().copied())
        .args(args);
    cmd.output().expect("run oxmpi-info")
}

#[test]
fn shows_value_and_source_from_environment() {
    let out = oxmpi_info(
        &[
            ("OXMPI_MCA_mpi_leave_pinned", "no"),
            ("OXMPI_MCA_btl", "^tcp"),
        ],
        &["--parsable", "--all"],
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    for want in [
        "mca:mpi:base:param:mpi_leave_pinned:value:false",
        "mca:mpi:base:param:mpi_leave_pinned:source:environment",
        "mca:btl:base:param:btl:value:^tcp",
        "mca:btl:base:param:btl:selected:self,sm",
        "mca:pmi:base:param:pmi_version:source:default",
    ] {
        assert!(
            stdout.lines().any(|l| l == want),
            "missing {want:?} in:\n{stdout}"
        );
    }
}

#[test]
fn shows_command_line_channel() {
    let out = oxmpi_info(
        &[
            ("OXMPI_MCA_CLI", "pmi_version=2"),
            ("OXMPI_MCA_pmi_version", "1"),
        ],
        &["--param", "pmi", "all", "--level", "9"],
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout
            .contains("parameter \"pmi_version\" (current value: \"2\", data source: command line"),
        "{stdout}"
    );
}

#[test]
fn bad_value_exits_non_zero_with_the_error() {
    let out = oxmpi_info(&[("OXMPI_MCA_mpi_leave_pinned", "sometimes")], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "invalid value \"sometimes\" for parameter mpi_leave_pinned \
             (from environment variable OXMPI_MCA_mpi_leave_pinned)"
        ),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing listed on error");
}

#[test]
fn unknown_command_line_name_exits_non_zero() {
    let out = oxmpi_info(&[("OXMPI_MCA_CLI", "btl_bogus=1")], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("unknown parameter btl_bogus (from command line --mca btl_bogus)"),
        "{stderr}"
    );
}

#[test]
fn help_documents_default_level() {
    let out = oxmpi_info(&[], &["--help"]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("--parsable") && stdout.contains("Default: 1"),
        "{stdout}"
    );
}
