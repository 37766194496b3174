//! Sources: precedence, parameter files, the command-line channel, and
//! gathering from a (fake) environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use oxmpi_runtime::mca::{
    decode_cli, encode_cli, parse_param_file, ParamSpec, Registry, Source, Sources, CLI_ENV,
    PARAM_FILES_ENV,
};

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(
        ParamSpec::size("btl", "sm", "eager_limit", 4096)
            .level(4)
            .help("eager"),
    )
    .unwrap();
    r.register_framework("btl", &["self", "sm", "tcp"], "btls")
        .unwrap();
    r
}

fn file(line: usize) -> Source {
    Source::File {
        path: PathBuf::from("/f.conf"),
        line,
    }
}

fn resolve(s: &Sources) -> (u64, Source) {
    let mut r = registry();
    r.apply(s).unwrap();
    let p = r.param("btl_sm_eager_limit").unwrap();
    (
        r.get_size("btl_sm_eager_limit").unwrap(),
        p.source().clone(),
    )
}

fn with_file(s: Sources, text: &str) -> Sources {
    s.with_file_text("/f.conf", text).unwrap()
}

#[test]
fn default_when_unset() {
    assert_eq!(resolve(&Sources::new()), (4096, Source::Default));
}

#[test]
fn each_source_alone() {
    let f = with_file(Sources::new(), "btl_sm_eager_limit = 1K\n");
    assert_eq!(resolve(&f), (1024, file(1)));
    let e = Sources::new().with_env("btl_sm_eager_limit", "2K");
    assert_eq!(resolve(&e), (2048, Source::Environment));
    let c = Sources::new().with_cli("btl_sm_eager_limit", "3K");
    assert_eq!(resolve(&c), (3072, Source::CommandLine));
}

#[test]
fn file_beats_default() {
    let s = with_file(Sources::new(), "# nothing\nbtl_sm_eager_limit=8\n");
    assert_eq!(resolve(&s), (8, file(2)));
}

#[test]
fn env_beats_file() {
    let s =
        with_file(Sources::new(), "btl_sm_eager_limit = 1K").with_env("btl_sm_eager_limit", "2K");
    assert_eq!(resolve(&s), (2048, Source::Environment));
}

#[test]
fn cli_beats_env() {
    let s = Sources::new()
        .with_cli("btl_sm_eager_limit", "3K")
        .with_env("btl_sm_eager_limit", "2K");
    assert_eq!(resolve(&s), (3072, Source::CommandLine));
}

#[test]
fn cli_beats_file() {
    let s =
        with_file(Sources::new(), "btl_sm_eager_limit = 1K").with_cli("btl_sm_eager_limit", "3K");
    assert_eq!(resolve(&s), (3072, Source::CommandLine));
}

#[test]
fn cli_beats_env_beats_file() {
    let s = with_file(Sources::new(), "btl_sm_eager_limit = 1K")
        .with_env("btl_sm_eager_limit", "2K")
        .with_cli("btl_sm_eager_limit", "3K");
    assert_eq!(resolve(&s), (3072, Source::CommandLine));
}

#[test]
fn overridden_bad_values_are_not_checked() {
    // Only the value that takes effect is parsed: a broken system file must
    // not stop a user from overriding it.
    let s =
        with_file(Sources::new(), "btl_sm_eager_limit = junk").with_env("btl_sm_eager_limit", "2K");
    assert_eq!(resolve(&s), (2048, Source::Environment));
}

#[test]
fn last_assignment_wins_within_cli_and_file() {
    let s = Sources::new()
        .with_cli("btl_sm_eager_limit", "1")
        .with_cli("btl_sm_eager_limit", "2");
    assert_eq!(resolve(&s), (2, Source::CommandLine));
    let s = with_file(
        Sources::new(),
        "btl_sm_eager_limit = 1\nbtl_sm_eager_limit = 2\n",
    );
    assert_eq!(resolve(&s), (2, file(2)));
}

#[test]
fn first_file_wins_across_files() {
    let s = Sources::new()
        .with_file_text("/home.conf", "btl_sm_eager_limit = 1\n")
        .unwrap()
        .with_file_text("/install.conf", "btl_sm_eager_limit = 2\nbtl = ^tcp\n")
        .unwrap();
    let mut r = registry();
    r.apply(&s).unwrap();
    assert_eq!(r.get_size("btl_sm_eager_limit").unwrap(), 1);
    assert_eq!(
        r.param("btl_sm_eager_limit").unwrap().source(),
        &Source::File {
            path: "/home.conf".into(),
            line: 1
        }
    );
    // A name only the second file sets still comes from it.
    assert_eq!(r.selection("btl").unwrap(), ["self", "sm"]);
    assert_eq!(
        r.param("btl").unwrap().source(),
        &Source::File {
            path: "/install.conf".into(),
            line: 2
        }
    );
}

#[test]
fn apply_again_resets_to_defaults() {
    let mut r = registry();
    r.apply(&Sources::new().with_env("btl_sm_eager_limit", "1"))
        .unwrap();
    r.apply(&Sources::new()).unwrap();
    assert_eq!(r.get_size("btl_sm_eager_limit").unwrap(), 4096);
    assert_eq!(
        r.param("btl_sm_eager_limit").unwrap().source(),
        &Source::Default
    );
}

#[test]
fn failed_apply_changes_nothing() {
    let mut r = registry();
    r.apply(&Sources::new().with_env("btl", "sm")).unwrap();
    let bad = Sources::new()
        .with_env("btl", "tcp")
        .with_env("btl_sm_eager_limit", "x");
    assert!(r.apply(&bad).is_err());
    assert_eq!(r.selection("btl").unwrap(), ["sm"]);
}

#[test]
fn unknown_env_and_file_names_are_kept_not_fatal() {
    let s = with_file(Sources::new(), "btl_ofi_thing = 3\n")
        .with_env("coll_tuned_x", "1")
        .with_env("coll_tuned_x", "2");
    let mut r = registry();
    r.apply(&s).unwrap();
    let names: Vec<_> = r.unknown().iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["coll_tuned_x", "btl_ofi_thing"]);
    assert_eq!(r.unknown()[1].source, file(1));
}

#[test]
fn param_file_syntax() {
    let text = "\
# a comment
   # an indented comment

btl = self,sm   # trailing comment
btl_sm_eager_limit=64K
 spaced_name  =   value with spaces  
empty =
hash = a#b
eq = x=y
\ttabbed\t=\t1\t
";
    let a = parse_param_file(Path::new("/p.conf"), text).unwrap();
    let got: Vec<_> = a
        .iter()
        .map(|a| (a.name.as_str(), a.value.as_str(), a.source.clone()))
        .collect();
    let f = |line| Source::File {
        path: "/p.conf".into(),
        line,
    };
    assert_eq!(
        got,
        [
            ("btl", "self,sm", f(4)),
            ("btl_sm_eager_limit", "64K", f(5)),
            ("spaced_name", "value with spaces", f(6)),
            ("empty", "", f(7)),
            ("hash", "a#b", f(8)),
            ("eq", "x=y", f(9)),
            ("tabbed", "1", f(10)),
        ]
    );
    assert!(parse_param_file(Path::new("/p"), "").unwrap().is_empty());
    assert!(parse_param_file(Path::new("/p"), "\r\n# x\r\na = 1\r\n").unwrap()[0].value == "1");
}

#[test]
fn cli_encoding_round_trip() {
    let pairs = [
        ("btl", "^tcp"),
        ("a_b", "with spaces, commas, = and ^"),
        ("empty", ""),
        ("eq", "=x="),
    ];
    let text = encode_cli(&pairs).unwrap();
    assert_eq!(
        text,
        "btl=^tcp\na_b=with spaces, commas, = and ^\nempty=\neq==x="
    );
    let back = decode_cli(&text).unwrap();
    let got: Vec<_> = back
        .iter()
        .map(|a| (a.name.as_str(), a.value.as_str()))
        .collect();
    assert_eq!(got, pairs);
    assert!(back.iter().all(|a| a.source == Source::CommandLine));
    assert_eq!(encode_cli::<&str, &str>(&[]).unwrap(), "");
    assert!(decode_cli("").unwrap().is_empty());
    // Owned strings work too.
    let owned = vec![(String::from("x"), String::from("1"))];
    assert_eq!(encode_cli(&owned).unwrap(), "x=1");
}

fn vars(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    list.iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

/// A fresh directory under the target's temporary area.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxmpi-mca-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn from_vars_reads_env_cli_and_default_files() {
    let dir = temp_dir("defaults");
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".oxmpi")).unwrap();
    std::fs::write(
        home.join(".oxmpi/mca-params.conf"),
        "btl_sm_eager_limit = 1K\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("prefix/bin")).unwrap();
    std::fs::create_dir_all(dir.join("prefix/etc")).unwrap();
    let install = dir.join("prefix/bin/../etc/oxmpi-mca-params.conf");
    std::fs::write(&install, "btl_sm_eager_limit = 2K\nbtl = ^sm\n").unwrap();
    let exe = dir.join("prefix/bin/prog");

    let cli = encode_cli(&[("btl", "tcp,self")]).unwrap();
    let v = vars(&[
        ("HOME", home.to_str().unwrap()),
        (CLI_ENV, &cli),
        ("OXMPI_MCA_other_param", "x"),
        ("OXMPI_LOG", "debug"),
        ("PATH", "/bin"),
    ]);
    let s = Sources::from_vars(v, Some(&exe)).unwrap();
    let files: Vec<_> = s
        .param_files()
        .iter()
        .map(|f| (f.path.clone(), f.found))
        .collect();
    assert_eq!(
        files,
        [(home.join(".oxmpi/mca-params.conf"), true), (install, true)]
    );
    let mut r = registry();
    r.apply(&s).unwrap();
    assert_eq!(r.get_size("btl_sm_eager_limit").unwrap(), 1024);
    assert_eq!(r.selection("btl").unwrap(), ["tcp", "self"]);
    assert_eq!(r.param("btl").unwrap().source(), &Source::CommandLine);
    // OXMPI_MCA_CLI itself is not a parameter; OXMPI_LOG is not ours.
    let unknown: Vec<_> = r.unknown().iter().map(|a| a.name.as_str()).collect();
    assert_eq!(unknown, ["other_param"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn from_vars_missing_default_files_are_skipped() {
    let dir = temp_dir("missing");
    let v = vars(&[("HOME", dir.to_str().unwrap())]);
    let s = Sources::from_vars(v, Some(&dir.join("bin/prog"))).unwrap();
    assert_eq!(s.param_files().len(), 2);
    assert!(s.param_files().iter().all(|f| !f.found));
    assert_eq!(s.assignments().count(), 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn from_vars_param_files_override() {
    let dir = temp_dir("override");
    let a = dir.join("a.conf");
    let b = dir.join("b.conf");
    std::fs::write(&a, "btl = sm\n").unwrap();
    std::fs::write(&b, "btl = tcp\nbtl_sm_eager_limit = 7\n").unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".oxmpi")).unwrap();
    std::fs::write(home.join(".oxmpi/mca-params.conf"), "btl = self\n").unwrap();
    let list = format!("{}:{}", a.display(), b.display());
    let v = vars(&[("HOME", home.to_str().unwrap()), (PARAM_FILES_ENV, &list)]);
    let s = Sources::from_vars(v, None).unwrap();
    // The override replaces the default list: the HOME file is not read.
    assert_eq!(s.param_files().len(), 2);
    let mut r = registry();
    r.apply(&s).unwrap();
    assert_eq!(r.selection("btl").unwrap(), ["sm"]);
    assert_eq!(r.get_size("btl_sm_eager_limit").unwrap(), 7);
    // OXMPI_MCA_PARAM_FILES is not a parameter either.
    assert!(r.unknown().is_empty());

    // An empty override means no files at all.
    let v = vars(&[("HOME", home.to_str().unwrap()), (PARAM_FILES_ENV, "")]);
    assert!(Sources::from_vars(v, None)
        .unwrap()
        .param_files()
        .is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn env_sorted_for_determinism() {
    let v = vars(&[("OXMPI_MCA_b", "1"), ("OXMPI_MCA_a", "2")]);
    let s = Sources::from_vars(v, None).unwrap();
    let names: Vec<_> = s.assignments().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}
