//! Command-line parsing for `oxmpirun` (also installed as `mpirun` and `mpiexec`).
//!
//! Hand-written rather than clap: MPI launchers take single-dash long options
//! (`-np 4`, `-mca name value`) and stop at the first word that is not an
//! option, which is the program; everything after it belongs to the program,
//! even words that look like options. clap cannot express both without
//! rewriting argv first, and the rules fit in one small function.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

/// Where each rank is bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindTo {
    /// Bind rank `r` to the `r mod cores`-th core this launcher may use.
    Core,
    /// No binding.
    None,
    /// `core` when the ranks fit on the cores, `none` when oversubscribed
    /// (binding several busy ranks to one core would only add contention).
    Auto,
}

/// A parsed `oxmpirun` command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchArgs {
    /// Number of ranks (`-n`, `-np`, `--np`, `-c`).
    pub np: u32,
    /// MCA parameters given with `--mca name value`, in command-line order.
    pub mca: Vec<(String, String)>,
    /// Environment for the ranks given with `-x VAR[=value]`; `None` means
    /// "export this launcher's value of VAR".
    pub export: Vec<(String, Option<String>)>,
    /// Prefix every output line with `[job,rank]<stream>:`.
    pub tag_output: bool,
    /// End the job after this long.
    pub timeout: Option<Duration>,
    /// Binding policy.
    pub bind_to: BindTo,
    /// Serve PMI over TCP (`PMI_PORT`) instead of inherited sockets (`PMI_FD`).
    pub pmi_port: bool,
    /// Keep the survivors running when a rank fails (`--enable-recovery`):
    /// they get `MPI_ERR_PROC_FAILED` from operations that need the dead
    /// rank, and the job ends when every rank has ended.
    pub enable_recovery: bool,
    /// The program and its arguments.
    pub program: OsString,
    /// Arguments passed to the program unchanged.
    pub program_args: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Run a job.
    Run(LaunchArgs),
    /// Print the help text.
    Help,
    /// Print the version.
    Version,
}

/// A command-line error; the message names the offending word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

/// The help text printed by `--help`.
pub const HELP: &str = "\
Usage: oxmpirun [options] <program> [program arguments...]

Starts <program> as an MPI job on this machine. The launcher is a PMI server
(PMI-1 and PMI-2), forwards stdin to rank 0 and every rank's output line by
line, and ends the whole job as soon as one rank fails.

Options:
  -n, -np, --np N        number of ranks (default 1); any N runs on any number
                         of cores: ranks beyond the core count are told they
                         are oversubscribed, so their waits yield
  --mca NAME VALUE       set an MCA parameter (also -mca); highest precedence
  -x VAR[=VALUE]         export VAR (with this launcher's value, or VALUE)
  --tag-output           prefix each line with [job,rank]<stdout>: / <stderr>:
  --timeout SECONDS      end the job after SECONDS (exit code 124)
  --bind-to core|none    bind each rank to one core (default: core when the
                         ranks fit on the cores, none when oversubscribed)
  --pmi-port             serve PMI over TCP (PMI_PORT) instead of PMI_FD
  --enable-recovery      keep the other ranks running when one fails (also
                         -disable-auto-cleanup): they get MPI_ERR_PROC_FAILED
                         from operations that need it and can finish
  -V, --version          print the version and exit
  -h, --help             print this help and exit

Exit status: 0 when every rank finished; otherwise the first failing rank's
exit code (also with --enable-recovery) (128+N when killed by signal N), the code given to abort, 124 on
timeout, 1 for a launcher error.
";

fn value_of(word: &str, it: &mut std::slice::Iter<'_, OsString>) -> Result<String, ArgError> {
    match it.next() {
        Some(v) => v
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| ArgError(format!("the value of {word} is not valid UTF-8"))),
        None => Err(ArgError(format!("{word} needs a value"))),
    }
}

/// Parses the launcher's arguments (without `argv[0]`).
///
/// ```
/// use oxmpi_launch::args::{parse, Command};
/// let argv: Vec<std::ffi::OsString> =
///     ["-np", "4", "-mca", "btl", "self,sm", "./app", "-n", "7"].iter().map(Into::into).collect();
/// let Command::Run(a) = parse(&argv).unwrap() else { panic!() };
/// assert_eq!(a.np, 4);
/// assert_eq!(a.mca, vec![("btl".to_string(), "self,sm".to_string())]);
/// assert_eq!(a.program_args, vec!["-n", "7"]);
/// ```
pub fn parse(argv: &[OsString]) -> Result<Command, ArgError> {
    let mut a = LaunchArgs {
        np: 1,
        mca: Vec::new(),
        export: Vec::new(),
        tag_output: false,
        timeout: None,
        bind_to: BindTo::Auto,
        pmi_port: false,
        enable_recovery: false,
        program: OsString::new(),
        program_args: Vec::new(),
    };
    let mut it = argv.iter();
    while let Some(word_os) = it.next() {
        let Some(word) = word_os.to_str() else {
            return Ok(program(a, word_os, it));
        };
        // `--opt=value` is accepted for the options that take one value.
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v.to_owned())),
            _ => (word, None),
        };
        let take = |it: &mut std::slice::Iter<'_, OsString>| match &inline {
            Some(v) => Ok(v.clone()),
            None => value_of(name, it),
        };
        match name {
            "-h" | "--help" | "-help" => return Ok(Command::Help),
            "-V" | "--version" | "-version" => return Ok(Command::Version),
            "-n" | "-np" | "--np" | "-c" | "--n" => {
                let v = take(&mut it)?;
                let n: u32 = v.parse().map_err(|_| {
                    ArgError(format!(
                        "{name} expects a positive number of ranks, got {v:?}"
                    ))
                })?;
                if n == 0 {
                    return Err(ArgError(format!("{name} 0: a job needs at least one rank")));
                }
                a.np = n;
            }
            "--mca" | "-mca" | "--gmca" | "-gmca" => {
                if inline.is_some() {
                    return Err(ArgError(format!(
                        "{name} takes two words: {name} NAME VALUE"
                    )));
                }
                let key = value_of(name, &mut it)?;
                let value = value_of(&format!("{name} {key}"), &mut it)?;
                if key.is_empty() {
                    return Err(ArgError(format!("{name}: empty parameter name")));
                }
                a.mca.push((key, value));
            }
            "-x" => {
                let v = take(&mut it)?;
                match v.split_once('=') {
                    Some((k, val)) => a.export.push((check_var(k)?, Some(val.to_owned()))),
                    None => a.export.push((check_var(&v)?, None)),
                }
            }
            "--tag-output" | "-tag-output" => a.tag_output = true,
            "--timeout" | "-timeout" => {
                let v = take(&mut it)?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| {
                        ArgError(format!(
                            "--timeout expects a positive number of seconds, got {v:?}"
                        ))
                    })?;
                a.timeout = Some(Duration::from_secs_f64(secs));
            }
            "--bind-to" | "-bind-to" => {
                let v = take(&mut it)?;
                a.bind_to = match v.as_str() {
                    "core" => BindTo::Core,
                    "none" => BindTo::None,
                    other => {
                        return Err(ArgError(format!(
                            "--bind-to expects core or none, got {other:?}"
                        )))
                    }
                };
            }
            "--pmi-port" | "-pmi-port" => a.pmi_port = true,
            "--enable-recovery"
            | "-enable-recovery"
            | "--disable-auto-cleanup"
            | "-disable-auto-cleanup" => a.enable_recovery = true,
            "--" => {
                let Some(prog) = it.next() else {
                    return Err(ArgError("no program given after --".into()));
                };
                return Ok(program(a, prog, it));
            }
            w if w.starts_with('-') && w.len() > 1 => {
                return Err(ArgError(format!(
                    "unknown option {word:?} (see oxmpirun --help)"
                )))
            }
            _ => return Ok(program(a, word_os, it)),
        }
    }
    Err(ArgError("no program given (see oxmpirun --help)".into()))
}

fn check_var(name: &str) -> Result<String, ArgError> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(name.to_owned())
    } else {
        Err(ArgError(format!(
            "-x: {name:?} is not a valid environment variable name"
        )))
    }
}

/// The run: the options parsed so far, the program and what follows it.
fn program(mut a: LaunchArgs, prog: &OsString, rest: std::slice::Iter<'_, OsString>) -> Command {
    a.program = prog.clone();
    a.program_args = rest.cloned().collect();
    Command::Run(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(words: &[&str]) -> Result<Command, ArgError> {
        let v: Vec<OsString> = words.iter().map(Into::into).collect();
        parse(&v)
    }

    fn run(words: &[&str]) -> LaunchArgs {
        match p(words).unwrap() {
            Command::Run(a) => a,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn all_spellings_of_np() {
        for w in ["-n", "-np", "--np", "-c"] {
            assert_eq!(run(&[w, "3", "a"]).np, 3);
        }
        assert_eq!(run(&["--np=5", "a"]).np, 5);
        assert_eq!(run(&["a"]).np, 1);
    }

    #[test]
    fn program_arguments_are_not_options() {
        let a = run(&["-n", "2", "prog", "--mca", "x", "y", "-n", "9"]);
        assert_eq!(a.np, 2);
        assert!(a.mca.is_empty());
        assert_eq!(a.program, "prog");
        assert_eq!(a.program_args, vec!["--mca", "x", "y", "-n", "9"]);
        let b = run(&["--", "-weird-name", "x"]);
        assert_eq!(b.program, "-weird-name");
    }

    #[test]
    fn mca_export_and_flags() {
        let a = run(&[
            "--mca",
            "btl",
            "^tcp",
            "-mca",
            "pmi_version",
            "2",
            "-x",
            "FOO=a=b",
            "-x",
            "HOME",
            "--tag-output",
            "--timeout",
            "1.5",
            "--bind-to",
            "none",
            "--pmi-port",
            "--enable-recovery",
            "prog",
        ]);
        assert_eq!(
            a.mca,
            vec![
                ("btl".into(), "^tcp".into()),
                ("pmi_version".into(), "2".into())
            ]
        );
        assert_eq!(
            a.export,
            vec![("FOO".into(), Some("a=b".into())), ("HOME".into(), None)]
        );
        assert!(a.tag_output && a.pmi_port && a.enable_recovery);
        assert!(run(&["-disable-auto-cleanup", "p"]).enable_recovery);
        assert!(!run(&["p"]).enable_recovery);
        assert_eq!(a.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(a.bind_to, BindTo::None);
    }

    #[test]
    fn errors_name_the_word() {
        let cases: &[(&[&str], &str)] = &[
            (&["-n"], "-n needs a value"),
            (&["-n", "zero", "a"], "expects a positive number of ranks"),
            (&["-n", "0", "a"], "at least one rank"),
            (&["--frobnicate", "a"], "unknown option \"--frobnicate\""),
            (&["--mca", "btl"], "--mca btl needs a value"),
            (
                &["--timeout", "-1", "a"],
                "--timeout expects a positive number",
            ),
            (
                &["--bind-to", "socket", "a"],
                "--bind-to expects core or none",
            ),
            (
                &["-x", "1BAD", "a"],
                "not a valid environment variable name",
            ),
            (&["-n", "2"], "no program given"),
        ];
        for (words, want) in cases {
            let err = p(words).unwrap_err().0;
            assert!(err.contains(want), "{words:?}: {err:?} lacks {want:?}");
        }
    }

    #[test]
    fn help_and_version() {
        assert_eq!(p(&["--help"]).unwrap(), Command::Help);
        assert_eq!(p(&["-V"]).unwrap(), Command::Version);
    }
}
