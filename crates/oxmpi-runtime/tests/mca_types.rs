//! Parsing of every parameter type, and typed registration/getters.

use oxmpi_runtime::mca::{
    parse_bool, parse_enum, parse_int, parse_list, parse_selection, parse_size, ParamSpec,
    ParamType, Registry, Sources, Value,
};

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn bools() {
    for t in ["1", "true", "TRUE", "Yes", "on", " On ", "yEs"] {
        assert_eq!(parse_bool(t), Ok(true), "{t:?}");
    }
    for t in ["0", "false", "False", "NO", "off", "\toff\n"] {
        assert_eq!(parse_bool(t), Ok(false), "{t:?}");
    }
    for t in ["", "2", "y", "n", "truee", "-1", "enable"] {
        let e = parse_bool(t).unwrap_err();
        assert!(e.contains("expected a boolean"), "{t:?}: {e}");
    }
}

#[test]
fn ints() {
    assert_eq!(parse_int("0"), Ok(0));
    assert_eq!(parse_int("42"), Ok(42));
    assert_eq!(parse_int(" -17 "), Ok(-17));
    assert_eq!(parse_int("+5"), Ok(5));
    assert_eq!(parse_int("0x1f"), Ok(31));
    assert_eq!(parse_int("0X1F"), Ok(31));
    assert_eq!(parse_int("-0x10"), Ok(-16));
    assert_eq!(parse_int("9223372036854775807"), Ok(i64::MAX));
    assert_eq!(parse_int("-9223372036854775808"), Ok(i64::MIN));
    assert_eq!(parse_int("0x7fffffffffffffff"), Ok(i64::MAX));
    for t in [
        "", "-", "0x", "abc", "12abc", "1.5", "--5", "0x-5", "+-1", "1 2", "1e3", "0xg",
    ] {
        let e = parse_int(t).unwrap_err();
        assert!(e.contains("expected an integer"), "{t:?}: {e}");
    }
    for t in [
        "9223372036854775808",
        "-9223372036854775809",
        "0x8000000000000000",
    ] {
        let e = parse_int(t).unwrap_err();
        assert!(e.contains("out of range"), "{t:?}: {e}");
    }
}

#[test]
fn sizes() {
    let cases: [(&str, u64); 16] = [
        ("0", 0),
        ("4096", 4096),
        ("4K", 4096),
        ("64k", 65536),
        ("1M", 1 << 20),
        ("1m", 1 << 20),
        ("2G", 2 << 30),
        ("2g", 2 << 30),
        ("8KB", 8192),
        ("8kb", 8192),
        ("8KiB", 8192),
        ("3MiB", 3 << 20),
        ("1gib", 1 << 30),
        ("100B", 100),
        (" 16 K ", 16384),
        ("17179869184", 16 << 30),
    ];
    for (t, v) in cases {
        assert_eq!(parse_size(t), Ok(v), "{t:?}");
    }
    for t in [
        "", "K", "-1", "-4K", "1.5M", "12Q", "4KK", "4 K B", "0x10", "4T", "ten", "+4",
    ] {
        let e = parse_size(t).unwrap_err();
        assert_eq!(e, "expected a size like 4096, 64K, 1M", "{t:?}");
    }
    for t in [
        "18446744073709551616",
        "17179869184G",
        "99999999999999999999999",
    ] {
        let e = parse_size(t).unwrap_err();
        assert!(e.contains("too large"), "{t:?}: {e}");
    }
    assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
}

#[test]
fn lists() {
    assert_eq!(parse_list(""), Ok(vec![]));
    assert_eq!(parse_list("  "), Ok(vec![]));
    assert_eq!(parse_list("a"), Ok(strings(&["a"])));
    assert_eq!(parse_list("a, b ,c"), Ok(strings(&["a", "b", "c"])));
    assert_eq!(parse_list("x y,^z"), Ok(strings(&["x y", "^z"])));
    for t in ["a,,b", "a,", ",a", " , "] {
        assert!(parse_list(t).unwrap_err().contains("empty entry"), "{t:?}");
    }
}

#[test]
fn enums() {
    let choices = strings(&["auto", "yes", "no"]);
    assert_eq!(parse_enum("auto", &choices), Ok("auto"));
    assert_eq!(parse_enum(" no ", &choices), Ok("no"));
    // Enum names are exact: "YES" is not "yes".
    for t in ["YES", "", "maybe", "auto,yes"] {
        assert_eq!(
            parse_enum(t, &choices).unwrap_err(),
            "expected one of: auto, yes, no",
            "{t:?}"
        );
    }
}

#[test]
fn selections() {
    let btl = strings(&["self", "sm", "tcp"]);
    let sel = |t: &str| parse_selection(t, &btl);
    assert_eq!(sel("").unwrap(), ["self", "sm", "tcp"]);
    assert_eq!(sel("   ").unwrap(), ["self", "sm", "tcp"]);
    // An include list keeps the user's order.
    assert_eq!(sel("tcp,self").unwrap(), ["tcp", "self"]);
    assert_eq!(sel(" sm , self ").unwrap(), ["sm", "self"]);
    assert_eq!(sel("self,sm,tcp").unwrap(), ["self", "sm", "tcp"]);
    // An exclude list keeps registration order.
    assert_eq!(sel("^tcp").unwrap(), ["self", "sm"]);
    assert_eq!(sel("^tcp,self").unwrap(), ["sm"]);
    assert_eq!(sel("^ tcp").unwrap(), ["self", "sm"]);
    assert_eq!(sel("^tcp,^self").unwrap(), ["sm"]);
    assert_eq!(sel("^self,sm,tcp").unwrap(), Vec::<String>::new());

    let e = sel("self,^tcp").unwrap_err();
    assert!(
        e.contains("cannot mix included components and excluded (^tcp)"),
        "{e}"
    );
    let e = sel("ofi").unwrap_err();
    assert_eq!(
        e,
        "unknown component \"ofi\" (known components: self, sm, tcp)"
    );
    let e = sel("^ofi").unwrap_err();
    assert!(e.contains("unknown component \"ofi\""), "{e}");
    for t in ["self,,sm", "self,", "^", "^tcp,", ",sm", "^,tcp"] {
        assert_eq!(
            sel(t).unwrap_err(),
            "empty entry in component list",
            "{t:?}"
        );
    }
    assert_eq!(
        sel("sm,sm").unwrap_err(),
        "component \"sm\" is listed twice"
    );
    // Names are case-sensitive.
    assert!(sel("SM").unwrap_err().contains("unknown component \"SM\""));
}

#[test]
fn type_parse_and_display_round_trip() {
    let choices = ParamType::Enum(strings(&["1", "2"]));
    let cases = [
        (ParamType::Bool, "on", Value::Bool(true), "true"),
        (ParamType::Int, "0x10", Value::Int(16), "16"),
        (ParamType::Size, "1K", Value::Size(1024), "1024"),
        (
            ParamType::String,
            " a b ",
            Value::String(" a b ".into()),
            " a b ",
        ),
        (
            ParamType::List,
            "a, b",
            Value::List(strings(&["a", "b"])),
            "a,b",
        ),
        (choices, "2", Value::Enum("2".into()), "2"),
    ];
    for (ty, text, value, shown) in cases {
        assert_eq!(ty.parse(text), Ok(value.clone()));
        assert_eq!(value.to_string(), shown);
        assert_eq!(ty.parse(shown), Ok(value), "display must re-parse");
    }
    let sel = ParamType::Selection(strings(&["a", "b"]));
    let v = sel.parse(" ^a ").unwrap();
    assert_eq!(
        v,
        Value::Selection {
            expr: "^a".into(),
            selected: strings(&["b"])
        }
    );
    assert_eq!(v.to_string(), "^a");
}

fn registry() -> Registry {
    let mut r = Registry::new();
    let specs = [
        ParamSpec::bool("fw", "base", "flag", false),
        ParamSpec::int("fw", "comp", "count", -3),
        ParamSpec::size("fw", "comp", "limit", 4096),
        ParamSpec::string("fw", "comp", "name", "x"),
        ParamSpec::list("fw", "comp", "ifs", &["eth0", "ib0"]),
        ParamSpec::enumeration("fw", "comp", "mode", &["a", "b"], "b"),
    ];
    for s in specs {
        r.register(s.level(2).help("help")).unwrap();
    }
    r.register_framework("fw", &["comp", "other"], "select")
        .unwrap();
    r
}

#[test]
fn defaults_before_apply_and_getters() {
    let r = registry();
    assert!(!r.get_bool("fw_flag").unwrap());
    assert_eq!(r.get_int("fw_comp_count").unwrap(), -3);
    assert_eq!(r.get_size("fw_comp_limit").unwrap(), 4096);
    assert_eq!(r.get_string("fw_comp_name").unwrap(), "x");
    assert_eq!(r.get_list("fw_comp_ifs").unwrap(), ["eth0", "ib0"]);
    assert_eq!(r.get_enum("fw_comp_mode").unwrap(), "b");
    assert_eq!(r.selection("fw").unwrap(), ["comp", "other"]);
    let p = r.param("fw_comp_limit").unwrap();
    assert_eq!(
        (p.framework(), p.component(), p.level(), p.help()),
        ("fw", "comp", 2, "help")
    );
    assert_eq!(p.ty(), &ParamType::Size);
    assert_eq!(p.default_value(), &Value::Size(4096));
    assert_eq!(r.params().len(), 7);
    assert_eq!(r.frameworks()[0].components(), ["comp", "other"]);
}

#[test]
fn every_type_through_apply() {
    let mut r = registry();
    let s = Sources::new()
        .with_env("fw_flag", "YES")
        .with_env("fw_comp_count", "0x20")
        .with_env("fw_comp_limit", "2M")
        .with_env("fw_comp_name", "hello world")
        .with_env("fw_comp_ifs", "lo")
        .with_env("fw_comp_mode", "a")
        .with_env("fw", "other,comp");
    r.apply(&s).unwrap();
    assert!(r.get_bool("fw_flag").unwrap());
    assert_eq!(r.get_int("fw_comp_count").unwrap(), 32);
    assert_eq!(r.get_size("fw_comp_limit").unwrap(), 2 << 20);
    assert_eq!(r.get_string("fw_comp_name").unwrap(), "hello world");
    assert_eq!(r.get_list("fw_comp_ifs").unwrap(), ["lo"]);
    assert_eq!(r.get_enum("fw_comp_mode").unwrap(), "a");
    assert_eq!(r.selection("fw").unwrap(), ["other", "comp"]);
}

#[test]
fn add_component_extends_selection() {
    let mut r = registry();
    r.add_component("fw", "third").unwrap();
    assert_eq!(r.selection("fw").unwrap(), ["comp", "other", "third"]);
    r.apply(&Sources::new().with_env("fw", "^comp")).unwrap();
    assert_eq!(r.selection("fw").unwrap(), ["other", "third"]);
}

#[test]
fn runtime_params() {
    let mut r = Registry::new();
    oxmpi_runtime::mca::register_runtime_params(&mut r).unwrap();
    assert_eq!(r.get_enum("pmi_version").unwrap(), "1");
    assert_eq!(r.get_enum("mpi_yield_when_idle").unwrap(), "auto");
    assert!(r.get_bool("mpi_leave_pinned").unwrap());
    assert_eq!(r.selection("btl").unwrap(), ["self", "sm", "tcp"]);
    assert_eq!(r.selection("pml").unwrap(), ["ob1", "cm"]);
    assert_eq!(r.selection("mtl").unwrap(), ["ofi"]);
    let s = Sources::new()
        .with_cli("pmi_version", "2")
        .with_cli("mpi_yield_when_idle", "yes")
        .with_cli("btl", "self,tcp")
        .with_cli("pml", "cm");
    r.apply(&s).unwrap();
    assert_eq!(r.selection("pml").unwrap(), ["cm"]);
    assert_eq!(r.get_enum("pmi_version").unwrap(), "2");
    assert_eq!(r.get_enum("mpi_yield_when_idle").unwrap(), "yes");
    assert_eq!(r.selection("btl").unwrap(), ["self", "tcp"]);
    // Registering twice reports the duplicate instead of panicking.
    let e = oxmpi_runtime::mca::register_runtime_params(&mut r).unwrap_err();
    assert_eq!(e.to_string(), "parameter pmi_version is registered twice");
}

#[test]
fn registries_are_independent() {
    let mut a = registry();
    let b = registry();
    a.apply(&Sources::new().with_env("fw_flag", "1")).unwrap();
    assert!(a.get_bool("fw_flag").unwrap());
    assert!(!b.get_bool("fw_flag").unwrap());
}
