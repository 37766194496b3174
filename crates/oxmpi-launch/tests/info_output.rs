//! `oxmpi-info` output, through `info::run` with an in-memory writer.

use clap::Parser;
use oxmpi_launch::info::{self, InfoArgs, InfoError};
use oxmpi_runtime::mca::{ParamSpec, Registry, Sources};

/// The runtime's parameters and two stand-ins with known text, so the
/// expected output does not change when components add parameters (the
/// real list is `info::default_registry`, checked by `info_binary`).
fn registry() -> Registry {
    let mut r = Registry::new();
    oxmpi_runtime::mca::register_runtime_params(&mut r).unwrap();
    r.register(
        ParamSpec::size("btl", "sm", "eager_limit", 4096)
            .level(4)
            .help("Messages up to this size are sent eagerly"),
    )
    .unwrap();
    r.register(
        ParamSpec::string("btl", "tcp", "if_include", "")
            .level(1)
            .help("Interfaces to use"),
    )
    .unwrap();
    r
}

fn run(sources: &Sources, argv: &[&str]) -> Result<String, InfoError> {
    let args = InfoArgs::try_parse_from(std::iter::once("oxmpi-info").chain(argv.iter().copied()))
        .unwrap();
    let mut out = Vec::new();
    info::run(&mut registry(), sources, &args, &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn parsable_param_lines() {
    let s = Sources::new().with_env("btl_sm_eager_limit", "64K");
    let out = run(&s, &["--parsable", "--param", "btl", "sm", "--level", "9"]).unwrap();
    assert_eq!(
        lines(&out),
        [
            "mca:btl:sm:param:btl_sm_eager_limit:value:65536",
            "mca:btl:sm:param:btl_sm_eager_limit:source:environment",
            "mca:btl:sm:param:btl_sm_eager_limit:level:4",
            "mca:btl:sm:param:btl_sm_eager_limit:type:size",
            "mca:btl:sm:param:btl_sm_eager_limit:help:Messages up to this size are sent eagerly",
        ]
    );
}

#[test]
fn parsable_sources_and_enumerators() {
    let s = Sources::new()
        .with_file_text("/etc/x.conf", "pmi_version = 2\n")
        .unwrap()
        .with_cli("btl", "^tcp");
    let out = run(&s, &["--parsable", "--all"]).unwrap();
    let l = lines(&out);
    for want in [
        concat!("package:oxmpi ", env!("CARGO_PKG_VERSION")),
        concat!("oxmpi:version:full:", env!("CARGO_PKG_VERSION")),
        "mca:param_file:/etc/x.conf:found",
        concat!("mca:btl:self:version:component:", env!("CARGO_PKG_VERSION")),
        concat!("mca:pml:ob1:version:component:", env!("CARGO_PKG_VERSION")),
        "mca:pmi:base:param:pmi_version:value:2",
        "mca:pmi:base:param:pmi_version:source:file:/etc/x.conf:1",
        "mca:pmi:base:param:pmi_version:enumerator:value:1",
        "mca:pmi:base:param:pmi_version:enumerator:value:2",
        "mca:btl:base:param:btl:value:^tcp",
        "mca:btl:base:param:btl:source:command-line",
        "mca:btl:base:param:btl:level:1",
        "mca:btl:base:param:btl:type:selection",
        "mca:btl:base:param:btl:enumerator:value:tcp",
        "mca:btl:base:param:btl:selected:self,sm",
        "mca:mpi:base:param:mpi_leave_pinned:value:true",
        "mca:mpi:base:param:mpi_leave_pinned:source:default",
        "mca:mpi:base:param:mpi_yield_when_idle:value:auto",
        "mca:btl:sm:param:btl_sm_eager_limit:value:4096",
    ] {
        assert!(l.contains(&want), "missing {want:?} in:\n{out}");
    }
    // Every line is a key:value fact.
    assert!(l.iter().all(|x| x.contains(':')));
}

#[test]
fn default_level_is_one() {
    let out = run(&Sources::new(), &["--parsable"]).unwrap();
    // Level 1: the selections and btl_tcp_if_include; not eager_limit (4),
    // pmi_version (4) or the level-3 mpi_* parameters.
    assert!(out.contains("mca:btl:base:param:btl:value:\n"));
    assert!(out.contains("mca:btl:tcp:param:btl_tcp_if_include:level:1\n"));
    assert!(!out.contains("btl_sm_eager_limit"), "{out}");
    assert!(!out.contains("pmi_version"), "{out}");
    assert!(!out.contains("mpi_leave_pinned"), "{out}");
    let out = run(&Sources::new(), &["--parsable", "--level", "3"]).unwrap();
    assert!(out.contains("mpi_leave_pinned:value:true"));
    assert!(!out.contains("btl_sm_eager_limit"));
    let out = run(&Sources::new(), &["--parsable", "--level", "4"]).unwrap();
    assert!(out.contains("btl_sm_eager_limit:value:4096"));
}

#[test]
fn param_filters() {
    let out = run(
        &Sources::new(),
        &["--parsable", "--param", "btl", "all", "--level", "9"],
    )
    .unwrap();
    let names: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(":value:") && !l.contains(":enumerator:"))
        .map(|l| l.split(':').nth(4).unwrap())
        .collect();
    // Framework-wide first, then components in registration order.
    assert_eq!(names, ["btl", "btl_sm_eager_limit", "btl_tcp_if_include"]);
    // No header in parsable --param mode: only parameter facts.
    assert!(out.lines().all(|l| l.starts_with("mca:btl:")), "{out}");

    let out = run(
        &Sources::new(),
        &["--parsable", "--param", "btl", "base", "--all"],
    )
    .unwrap();
    assert!(
        out.lines()
            .all(|l| l.starts_with("mca:btl:base:param:btl:")),
        "{out}"
    );

    let out = run(
        &Sources::new(),
        &["--parsable", "--param", "all", "all", "--level", "9"],
    )
    .unwrap();
    for n in [
        "pmi_version",
        "mpi_leave_pinned",
        "btl_sm_eager_limit",
        "pml:value",
    ] {
        assert!(out.contains(n), "{n}");
    }

    let out = run(
        &Sources::new(),
        &["--parsable", "--param", "mpi", "all", "--level", "9"],
    )
    .unwrap();
    assert!(out.contains("mpi_yield_when_idle") && !out.contains("btl"));
}

#[test]
fn param_filter_errors() {
    let e = run(&Sources::new(), &["--param", "coll", "all"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown framework \"coll\" (known: btl, pml, mtl, pmi, mpi)"
    );
    let e = run(&Sources::new(), &["--param", "btl", "ofi"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "framework btl has no component \"ofi\" (known: base, self, sm, tcp)"
    );
    // --param takes exactly two values and --level 1..=9.
    assert!(InfoArgs::try_parse_from(["oxmpi-info", "--param", "btl"]).is_err());
    assert!(InfoArgs::try_parse_from(["oxmpi-info", "--level", "0"]).is_err());
    assert!(InfoArgs::try_parse_from(["oxmpi-info", "--level", "10"]).is_err());
    let args = InfoArgs {
        param: Some(vec!["btl".into()]),
        ..Default::default()
    };
    let e = info::run(&mut registry(), &Sources::new(), &args, &mut Vec::new()).unwrap_err();
    assert!(matches!(e, InfoError::BadParamArgs));
}

#[test]
fn human_output() {
    let s = Sources::new()
        .with_env("btl_sm_eager_limit", "1M")
        .with_cli("btl", "sm,self")
        .with_file_text("/etc/x.conf", "mpi_leave_pinned = off\n")
        .unwrap();
    let out = run(&s, &["--all"]).unwrap();
    let want = [
        concat!("                 Package: oxmpi ", env!("CARGO_PKG_VERSION")),
        concat!("                   oxmpi: ", env!("CARGO_PKG_VERSION")),
        "              Frameworks: btl, pml, mtl, pmi, mpi",
        "          Parameter file: /etc/x.conf",
        concat!("                 MCA btl: self (v", env!("CARGO_PKG_VERSION"), ")"),
        concat!("                 MCA pml: ob1 (v", env!("CARGO_PKG_VERSION"), ")"),
        concat!("                 MCA pml: cm (v", env!("CARGO_PKG_VERSION"), ")"),
        concat!("                 MCA mtl: ofi (v", env!("CARGO_PKG_VERSION"), ")"),
        "                 MCA btl: parameter \"btl\" (current value: \"sm,self\", data source: command line, level: 1 user/basic, type: selection)",
        "                          Valid components: self, sm, tcp",
        "                          Selected: sm, self",
        "                 MCA btl: parameter \"btl_sm_eager_limit\" (current value: \"1048576\", data source: environment (OXMPI_MCA_btl_sm_eager_limit), level: 4 tuner/basic, type: size)",
        "                          Messages up to this size are sent eagerly",
        "                 MCA pmi: parameter \"pmi_version\" (current value: \"1\", data source: default, level: 4 tuner/basic, type: enum)",
        "                          Valid values: 1, 2",
        "                 MCA mpi: parameter \"mpi_leave_pinned\" (current value: \"false\", data source: file /etc/x.conf:1, level: 3 user/all, type: bool)",
    ];
    let l = lines(&out);
    for w in want {
        assert!(l.contains(&w), "missing {w:?} in:\n{out}");
    }
    // Non-parsable output always has the header, even with --param.
    let out = run(&Sources::new(), &["--param", "btl", "sm", "--level", "9"]).unwrap();
    assert!(
        out.starts_with(concat!(
            "                 Package: oxmpi ",
            env!("CARGO_PKG_VERSION"),
            "\n"
        )),
        "{out}"
    );
    assert!(out.contains("btl_sm_eager_limit"));
    assert!(!out.contains("MCA btl: self"));
}

#[test]
fn unknown_parameters_are_listed() {
    let s = Sources::new().with_env("coll_tuned_priority", "30");
    let out = run(&s, &[]).unwrap();
    assert!(
        out.contains(
            "       Unknown parameter: \"coll_tuned_priority\" = \"30\" (from environment variable \
             OXMPI_MCA_coll_tuned_priority; no component registers it, ignored)"
        ),
        "{out}"
    );
    let out = run(&s, &["--parsable"]).unwrap();
    assert!(out.contains("unknown:param:coll_tuned_priority:value:30\n"));
    assert!(out.contains("unknown:param:coll_tuned_priority:source:environment\n"));
}

#[test]
fn bad_value_is_the_rank_error() {
    let s = Sources::new().with_env("btl_sm_eager_limit", "12Q");
    let e = run(&s, &["--all"]).unwrap_err();
    assert!(matches!(e, InfoError::Mca(_)));
    assert_eq!(
        e.to_string(),
        "invalid value \"12Q\" for parameter btl_sm_eager_limit \
         (from environment variable OXMPI_MCA_btl_sm_eager_limit): \
         expected a size like 4096, 64K, 1M"
    );
    let e = run(&Sources::new().with_cli("nope", "1"), &[]).unwrap_err();
    assert!(e
        .to_string()
        .starts_with("unknown parameter nope (from command line --mca nope)"));
}

#[test]
fn control_characters_stay_on_one_line() {
    let s = Sources::new().with_env("btl_tcp_if_include", "a\nb");
    let out = run(&s, &["--parsable", "--param", "btl", "tcp"]).unwrap();
    assert!(
        out.contains("mca:btl:tcp:param:btl_tcp_if_include:value:a\\nb\n"),
        "{out}"
    );
}
