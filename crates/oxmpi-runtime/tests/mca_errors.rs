//! Every error message: each names the parameter (or file and line) and the
//! source, so the user can fix it from the message alone.

use std::ffi::OsString;
use std::path::Path;

use oxmpi_runtime::mca::{
    decode_cli, encode_cli, parse_param_file, register_runtime_params, McaError, ParamSpec,
    Registry, Sources,
};

fn registry() -> Registry {
    let mut r = Registry::new();
    register_runtime_params(&mut r).unwrap();
    let specs = [
        ParamSpec::size("btl", "sm", "eager_limit", 4096),
        ParamSpec::int("btl", "tcp", "port", 0),
        ParamSpec::list("btl", "tcp", "if_include", &[]),
    ];
    for s in specs {
        r.register(s.level(4).help("h")).unwrap();
    }
    r
}

fn apply_err(s: Sources) -> String {
    let mut r = registry();
    r.apply(&s).unwrap_err().to_string()
}

#[test]
fn invalid_size_from_environment() {
    let e = apply_err(Sources::new().with_env("btl_sm_eager_limit", "12Q"));
    assert_eq!(
        e,
        "invalid value \"12Q\" for parameter btl_sm_eager_limit \
         (from environment variable OXMPI_MCA_btl_sm_eager_limit): \
         expected a size like 4096, 64K, 1M"
    );
}

#[test]
fn invalid_size_too_large_from_cli() {
    let e = apply_err(Sources::new().with_cli("btl_sm_eager_limit", "99999999999G"));
    assert_eq!(
        e,
        "invalid value \"99999999999G\" for parameter btl_sm_eager_limit \
         (from command line --mca btl_sm_eager_limit): \
         expected a size like 4096, 64K, 1M (too large for 64 bits)"
    );
}

#[test]
fn invalid_bool_from_file() {
    let s = Sources::new()
        .with_file_text("/etc/oxmpi.conf", "\n# c\nmpi_leave_pinned = sometimes\n")
        .unwrap();
    assert_eq!(
        apply_err(s),
        "invalid value \"sometimes\" for parameter mpi_leave_pinned \
         (from parameter file /etc/oxmpi.conf line 3): \
         expected a boolean: 1/0, true/false, yes/no or on/off"
    );
}

#[test]
fn invalid_int() {
    let e = apply_err(Sources::new().with_env("btl_tcp_port", "80x"));
    assert_eq!(
        e,
        "invalid value \"80x\" for parameter btl_tcp_port \
         (from environment variable OXMPI_MCA_btl_tcp_port): \
         expected an integer like 42, -1 or 0x1f"
    );
    let e = apply_err(Sources::new().with_cli("btl_tcp_port", "99999999999999999999"));
    assert!(e.contains("out of range for a 64-bit integer"), "{e}");
    assert!(e.contains("(from command line --mca btl_tcp_port)"), "{e}");
}

#[test]
fn invalid_enum() {
    let e = apply_err(Sources::new().with_cli("pmi_version", "3"));
    assert_eq!(
        e,
        "invalid value \"3\" for parameter pmi_version \
         (from command line --mca pmi_version): expected one of: 1, 2"
    );
    let e = apply_err(Sources::new().with_env("mpi_yield_when_idle", "always"));
    assert_eq!(
        e,
        "invalid value \"always\" for parameter mpi_yield_when_idle \
         (from environment variable OXMPI_MCA_mpi_yield_when_idle): \
         expected one of: auto, yes, no"
    );
}

#[test]
fn invalid_list() {
    let e = apply_err(Sources::new().with_env("btl_tcp_if_include", "eth0,,ib0"));
    assert_eq!(
        e,
        "invalid value \"eth0,,ib0\" for parameter btl_tcp_if_include \
         (from environment variable OXMPI_MCA_btl_tcp_if_include): \
         empty entry in comma-separated list"
    );
}

#[test]
fn selection_unknown_component() {
    let e = apply_err(Sources::new().with_cli("btl", "self,ofi"));
    assert_eq!(
        e,
        "invalid value \"self,ofi\" for parameter btl (from command line --mca btl): \
         unknown component \"ofi\" (known components: self, sm, tcp)"
    );
}

#[test]
fn selection_mixed_include_exclude() {
    let e = apply_err(Sources::new().with_env("btl", "self,^tcp"));
    assert_eq!(
        e,
        "invalid value \"self,^tcp\" for parameter btl \
         (from environment variable OXMPI_MCA_btl): cannot mix included components \
         and excluded (^tcp) ones; use either \"a,b\" or \"^a,b\""
    );
}

#[test]
fn selection_empty_entry_and_duplicate() {
    let s = Sources::new()
        .with_file_text("/x.conf", "pml = ob1,\n")
        .unwrap();
    assert_eq!(
        apply_err(s),
        "invalid value \"ob1,\" for parameter pml (from parameter file /x.conf line 1): \
         empty entry in component list"
    );
    let e = apply_err(Sources::new().with_env("btl", "sm,sm"));
    assert!(
        e.ends_with("(from environment variable OXMPI_MCA_btl): component \"sm\" is listed twice"),
        "{e}"
    );
}

#[test]
fn unknown_name_on_command_line() {
    let e = apply_err(Sources::new().with_cli("btl_sm_eager_limt", "1"));
    assert_eq!(
        e,
        "unknown parameter btl_sm_eager_limt (from command line --mca btl_sm_eager_limt): \
         no component registers it; did you mean btl_sm_eager_limit?"
    );
    let e = apply_err(Sources::new().with_cli("MPI_LEAVE_PINNED", "1"));
    assert_eq!(
        e,
        "unknown parameter MPI_LEAVE_PINNED (from command line --mca MPI_LEAVE_PINNED): \
         no component registers it; parameter names are lowercase: did you mean mpi_leave_pinned?"
    );
    let e = apply_err(Sources::new().with_cli("coll_tuned_use_dynamic_rules", "1"));
    assert_eq!(
        e,
        "unknown parameter coll_tuned_use_dynamic_rules \
         (from command line --mca coll_tuned_use_dynamic_rules): no component registers it"
    );
    assert!(matches!(
        registry().apply(&Sources::new().with_cli("nope", "1")),
        Err(McaError::UnknownParameter { .. })
    ));
}

#[test]
fn malformed_param_file_lines() {
    let p = Path::new("/home/u/.oxmpi/mca-params.conf");
    let e = parse_param_file(p, "# ok\nbtl = sm\nbtl sm\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "malformed line 3 in parameter file /home/u/.oxmpi/mca-params.conf: \
         expected \"name = value\", got \"btl sm\""
    );
    let e = parse_param_file(p, "= 3\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "malformed line 1 in parameter file /home/u/.oxmpi/mca-params.conf: \
         missing parameter name before \"=\""
    );
    let e = parse_param_file(p, "\n\nbtl sm = 3\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "malformed line 3 in parameter file /home/u/.oxmpi/mca-params.conf: \
         invalid parameter name \"btl sm\""
    );
    // Through Sources too.
    let e = Sources::new().with_file_text(p, "x\n").unwrap_err();
    assert!(matches!(e, McaError::MalformedFile { line: 1, .. }));
}

#[test]
fn unreadable_or_missing_named_file() {
    let missing = std::env::temp_dir().join(format!("oxmpi-no-such-{}.conf", std::process::id()));
    let e = Sources::new()
        .with_file(&missing, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "cannot read parameter file {}: ",
            missing.display()
        )),
        "{e}"
    );
    // The same file is fine when it is only a default location.
    assert!(Sources::new().with_file(&missing, false).is_ok());
    // OXMPI_MCA_PARAM_FILES names files explicitly: missing is an error.
    let v: Vec<(OsString, OsString)> = vec![(
        "OXMPI_MCA_PARAM_FILES".into(),
        missing.clone().into_os_string(),
    )];
    let e = Sources::from_vars(v, None).unwrap_err().to_string();
    assert!(e.contains(&missing.display().to_string()), "{e}");
}

#[test]
fn cli_channel_errors() {
    let e = encode_cli(&[("btl", "self\nsm")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad --mca command-line parameters (OXMPI_MCA_CLI): \
         the value of --mca btl contains a newline, which is not allowed"
    );
    let e = encode_cli(&[("btl", "a\rb")]).unwrap_err();
    assert!(e.to_string().contains("--mca btl contains a newline"));
    let e = encode_cli(&[("", "x")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad --mca command-line parameters (OXMPI_MCA_CLI): empty parameter name"
    );
    let e = encode_cli(&[("a=b", "x")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad --mca command-line parameters (OXMPI_MCA_CLI): invalid parameter name \"a=b\""
    );
    let e = encode_cli(&[("a", "x\0")]).unwrap_err();
    assert!(e.to_string().contains("NUL"));
    let e = decode_cli("btl=sm\nnoequals").unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad --mca command-line parameters (OXMPI_MCA_CLI): entry 2 (\"noequals\") is not name=value"
    );
    let e = decode_cli("=x").unwrap_err();
    assert!(e.to_string().ends_with("empty parameter name"));
    // Through from_vars.
    let v: Vec<(OsString, OsString)> = vec![("OXMPI_MCA_CLI".into(), "junk".into())];
    assert!(matches!(
        Sources::from_vars(v, None),
        Err(McaError::CommandLine { .. })
    ));
}

#[test]
fn non_unicode_environment_value() {
    use std::os::unix::ffi::OsStringExt;
    let v = vec![(
        OsString::from("OXMPI_MCA_btl"),
        OsString::from_vec(vec![0xff, 0xfe]),
    )];
    let e = Sources::from_vars(v, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "environment variable OXMPI_MCA_btl is not valid UTF-8"
    );
}

#[test]
fn registration_errors() {
    let mut r = Registry::new();
    let ok = |s: ParamSpec| s.level(1).help("h");
    r.register(ok(ParamSpec::bool("mpi", "base", "x", true)))
        .unwrap();
    assert_eq!(
        r.register(ok(ParamSpec::int("mpi", "base", "x", 1)))
            .unwrap_err()
            .to_string(),
        "parameter mpi_x is registered twice"
    );
    assert_eq!(
        r.register(ParamSpec::bool("mpi", "base", "y", true).help("h"))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter mpi_y: level 0 is outside 1..=9 (set it with .level())"
    );
    assert_eq!(
        r.register(
            ParamSpec::bool("mpi", "base", "y", true)
                .level(10)
                .help("h")
        )
        .unwrap_err()
        .to_string(),
        "invalid registration of parameter mpi_y: level 10 is outside 1..=9 (set it with .level())"
    );
    assert_eq!(
        r.register(ParamSpec::bool("mpi", "base", "y", true).level(1))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter mpi_y: help text is empty (set it with .help())"
    );
    assert_eq!(
        r.register(ok(ParamSpec::enumeration("mpi", "base", "e", &["a"], "b")))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter mpi_e: default \"b\" is not one of: a"
    );
    assert_eq!(
        r.register(ok(ParamSpec::enumeration("mpi", "base", "e", &[], "b")))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter mpi_e: an enum needs at least one choice"
    );
    assert_eq!(
        r.register(ok(ParamSpec::bool("Mpi", "base", "y", true)))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter Mpi_y: framework name \"Mpi\" must be lowercase letters and digits"
    );
    assert_eq!(
        r.register(ok(ParamSpec::bool("mpi", "my_comp", "y", true)))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter mpi_my_comp_y: component name \"my_comp\" must be lowercase letters and digits"
    );
    assert_eq!(
        r.register(ok(ParamSpec::bool("mpi", "base", "_y", true)))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter mpi__y: parameter name \"_y\" must be lowercase letters, digits and inner underscores"
    );
    assert_eq!(
        r.register(ok(ParamSpec::bool("all", "base", "y", true)))
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter all_y: framework name \"all\" is reserved"
    );

    r.register_framework("btl", &["sm"], "h").unwrap();
    assert_eq!(
        r.register_framework("btl", &["tcp"], "h")
            .unwrap_err()
            .to_string(),
        "parameter btl is registered twice"
    );
    assert_eq!(
        r.register_framework("pml", &["ob1", "ob1"], "h")
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter pml: component \"ob1\" is listed twice"
    );
    assert_eq!(
        r.register_framework("pml", &["base"], "h")
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter pml: \"base\" is reserved, not a component"
    );
    assert_eq!(
        r.register_framework("pml", &["ob1"], " ")
            .unwrap_err()
            .to_string(),
        "invalid registration of parameter pml: help text is empty"
    );
    assert_eq!(
        r.add_component("btl", "sm").unwrap_err().to_string(),
        "parameter btl component sm is registered twice"
    );
    assert_eq!(
        r.add_component("coll", "tuned").unwrap_err().to_string(),
        "parameter coll is not registered"
    );
}

#[test]
fn getter_errors() {
    let r = registry();
    assert_eq!(
        r.get_bool("no_such").unwrap_err().to_string(),
        "parameter no_such is not registered"
    );
    assert_eq!(
        r.get_int("mpi_leave_pinned").unwrap_err().to_string(),
        "parameter mpi_leave_pinned has type bool, not int"
    );
    assert_eq!(
        r.get_bool("btl_sm_eager_limit").unwrap_err().to_string(),
        "parameter btl_sm_eager_limit has type size, not bool"
    );
    assert_eq!(
        r.get_size("pmi_version").unwrap_err().to_string(),
        "parameter pmi_version has type enum, not size"
    );
    assert_eq!(
        r.get_string("btl").unwrap_err().to_string(),
        "parameter btl has type selection, not string"
    );
    assert_eq!(
        r.get_list("btl_tcp_port").unwrap_err().to_string(),
        "parameter btl_tcp_port has type int, not list"
    );
    assert_eq!(
        r.get_enum("btl_tcp_if_include").unwrap_err().to_string(),
        "parameter btl_tcp_if_include has type list, not enum"
    );
    assert_eq!(
        r.selection("pmi_version").unwrap_err().to_string(),
        "parameter pmi_version has type enum, not selection"
    );
}
