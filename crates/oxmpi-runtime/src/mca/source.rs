//! Where parameter values come from, and how they are gathered.
//!
//! Contract: a [`Sources`] is the raw `name -> text` assignments from the
//! three non-default sources, each remembered with its origin. Gathering
//! reads the process environment and the parameter files; nothing else does,
//! so tests build a `Sources` by hand ([`Sources::new`] and the `with_*`
//! methods) or from a fake environment ([`Sources::from_vars`]).
//!
//! Precedence (highest first): command line, environment, parameter files,
//! default. Within the command line and within one file the *last*
//! assignment of a name wins; across files the *first* file that sets a name
//! wins (the user's `$HOME` file overrides the installation's).
//!
//! The command-line channel: `oxmpirun --mca name value` reaches every rank
//! as one environment variable, [`CLI_ENV`] (`OXMPI_MCA_CLI`), holding one
//! `name=value` per line (lines separated by `\n`). The name is everything
//! before the first `=`, the value everything after it, verbatim (spaces,
//! commas, `=`, `^` included). A value cannot contain a newline; a name must
//! be non-empty and contain neither `=` nor blanks. See [`encode_cli`] and
//! [`decode_cli`].

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use super::McaError;

/// Prefix of the per-parameter environment variables: `OXMPI_MCA_<name>`.
pub const ENV_PREFIX: &str = "OXMPI_MCA_";
/// The variable carrying `oxmpirun --mca` pairs to the ranks.
pub const CLI_ENV: &str = "OXMPI_MCA_CLI";
/// Colon-separated list of parameter files that replaces the default list.
pub const PARAM_FILES_ENV: &str = "OXMPI_MCA_PARAM_FILES";
/// The user's parameter file, relative to `$HOME`.
pub const HOME_PARAM_FILE: &str = ".oxmpi/mca-params.conf";
/// The installation's parameter file, relative to the directory holding the
/// running executable.
pub const INSTALL_PARAM_FILE: &str = "../etc/oxmpi-mca-params.conf";

/// Where a parameter's current value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Nobody set it: the registered default.
    Default,
    /// A line of a parameter file.
    File {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
    },
    /// The environment variable `OXMPI_MCA_<name>`.
    Environment,
    /// `oxmpirun --mca` (delivered through `OXMPI_MCA_CLI`).
    CommandLine,
}

impl Source {
    /// A human description for parameter `name`, as used in error messages.
    ///
    /// ```
    /// use oxmpi_runtime::mca::Source;
    /// assert_eq!(
    ///     Source::Environment.describe("btl"),
    ///     "environment variable OXMPI_MCA_btl"
    /// );
    /// ```
    pub fn describe(&self, name: &str) -> String {
        match self {
            Source::Default => "the default value".to_owned(),
            Source::File { path, line } => {
                format!("parameter file {} line {line}", path.display())
            }
            Source::Environment => format!("environment variable {ENV_PREFIX}{name}"),
            Source::CommandLine => format!("command line --mca {name}"),
        }
    }
}

impl fmt::Display for Source {
    /// The short form used by `oxmpi-info`: `default`, `environment`,
    /// `command line`, `file <path>:<line>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File { path, line } => write!(f, "file {}:{line}", path.display()),
            Source::Environment => f.write_str("environment"),
            Source::CommandLine => f.write_str("command line"),
        }
    }
}

/// One `name = value` assignment with its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The parameter name as given.
    pub name: String,
    /// The value text as given (file values are trimmed).
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// A parameter file considered while gathering, for `oxmpi-info` to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamFile {
    /// The file's path.
    pub path: PathBuf,
    /// Whether it existed (a missing default file is not an error).
    pub found: bool,
}

/// The raw assignments from command line, environment and files.
///
/// ```
/// use oxmpi_runtime::mca::Sources;
/// let sources = Sources::new()
///     .with_cli("btl", "self,sm")
///     .with_env("mpi_leave_pinned", "0");
/// assert_eq!(sources.assignments().count(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Sources {
    cli: Vec<Assignment>,
    env: Vec<Assignment>,
    files: Vec<Assignment>,
    param_files: Vec<ParamFile>,
}

impl Sources {
    /// No assignments at all: every parameter keeps its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a command-line (`--mca name value`) assignment.
    pub fn with_cli(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.cli.push(Assignment {
            name: name.into(),
            value: value.into(),
            source: Source::CommandLine,
        });
        self
    }

    /// Adds an environment assignment (as if `OXMPI_MCA_<name>=<value>`).
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push(Assignment {
            name: name.into(),
            value: value.into(),
            source: Source::Environment,
        });
        self
    }

    /// Adds the assignments of a parameter file's text, as if read from
    /// `path` (which is only used for messages). Files added earlier take
    /// precedence over files added later.
    ///
    /// ```
    /// use oxmpi_runtime::mca::Sources;
    /// let s = Sources::new()
    ///     .with_file_text("/etc/x.conf", "# tuning\nbtl = ^tcp\n")
    ///     .unwrap();
    /// assert_eq!(s.assignments().next().unwrap().value, "^tcp");
    /// ```
    pub fn with_file_text(
        mut self,
        path: impl Into<PathBuf>,
        text: &str,
    ) -> Result<Self, McaError> {
        let path = path.into();
        self.files.extend(parse_param_file(&path, text)?);
        self.param_files.push(ParamFile { path, found: true });
        Ok(self)
    }

    /// Reads a parameter file from disk. A missing file is skipped when
    /// `required` is false (the default locations) and an error when true
    /// (a file the user named); any other read error is always an error.
    pub fn with_file(mut self, path: impl Into<PathBuf>, required: bool) -> Result<Self, McaError> {
        let path = path.into();
        match std::fs::read_to_string(&path) {
            Ok(text) => self.with_file_text(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                self.param_files.push(ParamFile { path, found: false });
                Ok(self)
            }
            Err(error) => Err(McaError::FileRead { path, error }),
        }
    }

    /// Gathers the sources of this process: `OXMPI_MCA_CLI`, every
    /// `OXMPI_MCA_<name>` variable, and the parameter files (see
    /// [`Sources::from_vars`]).
    pub fn from_process() -> Result<Self, McaError> {
        let exe = std::env::current_exe().ok();
        Self::from_vars(std::env::vars_os(), exe.as_deref())
    }

    /// Gathers sources from the given environment variables and the path of
    /// the running executable (for the installation's file), reading the
    /// parameter files from disk:
    ///
    /// * `OXMPI_MCA_CLI`: decoded with [`decode_cli`];
    /// * `OXMPI_MCA_<name>`: one assignment each (except `OXMPI_MCA_CLI` and
    ///   `OXMPI_MCA_PARAM_FILES`), sorted by name for determinism;
    /// * files: if `OXMPI_MCA_PARAM_FILES` is set, exactly the files it lists
    ///   (colon-separated, each must exist); otherwise
    ///   `$HOME/.oxmpi/mca-params.conf` then
    ///   `<dir of exe>/../etc/oxmpi-mca-params.conf`, each skipped if missing.
    ///
    /// ```
    /// use oxmpi_runtime::mca::{Source, Sources};
    /// let vars = [("OXMPI_MCA_btl", "^tcp"), ("PATH", "/bin")]
    ///     .map(|(k, v)| (k.into(), v.into()));
    /// let s = Sources::from_vars(vars, None).unwrap();
    /// let a = s.assignments().next().unwrap();
    /// assert_eq!((a.name.as_str(), a.source.clone()), ("btl", Source::Environment));
    /// ```
    pub fn from_vars(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        exe: Option<&Path>,
    ) -> Result<Self, McaError> {
        let mut s = Sources::new();
        let mut home: Option<OsString> = None;
        let mut param_files: Option<OsString> = None;
        for (key, value) in vars {
            if key == "HOME" {
                home = Some(value);
                continue;
            }
            if key == PARAM_FILES_ENV {
                param_files = Some(value);
                continue;
            }
            // A non-UTF-8 variable name cannot name a parameter: not ours.
            let Some(key) = key.to_str() else { continue };
            let Some(name) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let value = value.into_string().map_err(|_| McaError::NonUnicodeEnv {
                var: key.to_owned(),
            })?;
            if key == CLI_ENV {
                s.cli = decode_cli(&value)?;
            } else {
                s.env.push(Assignment {
                    name: name.to_owned(),
                    value,
                    source: Source::Environment,
                });
            }
        }
        s.env.sort_by(|a, b| a.name.cmp(&b.name));

        if let Some(list) = param_files {
            for p in std::env::split_paths(&list) {
                if !p.as_os_str().is_empty() {
                    s = s.with_file(p, true)?;
                }
            }
        } else {
            if let Some(home) = home.filter(|h| !h.is_empty()) {
                s = s.with_file(Path::new(&home).join(HOME_PARAM_FILE), false)?;
            }
            if let Some(dir) = exe.and_then(Path::parent) {
                s = s.with_file(dir.join(INSTALL_PARAM_FILE), false)?;
            }
        }
        Ok(s)
    }

    /// Every assignment: command line, then environment, then files, each
    /// in the order given. Use [`Sources::lookup`] for the one that counts.
    pub fn assignments(&self) -> impl Iterator<Item = &Assignment> {
        self.cli.iter().chain(&self.env).chain(&self.files)
    }

    /// The winning assignment for `name`, if any source sets it.
    ///
    /// ```
    /// use oxmpi_runtime::mca::{Source, Sources};
    /// let s = Sources::new().with_env("btl", "tcp").with_cli("btl", "sm");
    /// assert_eq!(s.lookup("btl").unwrap().source, Source::CommandLine);
    /// ```
    pub fn lookup(&self, name: &str) -> Option<&Assignment> {
        self.cli
            .iter()
            .rev()
            .find(|a| a.name == name)
            .or_else(|| self.env.iter().rev().find(|a| a.name == name))
            .or_else(|| self.file_lookup(name))
    }

    /// First file that sets `name` wins; within it, its last line.
    fn file_lookup(&self, name: &str) -> Option<&Assignment> {
        let first_path = &self.files.iter().find(|a| a.name == name)?.source;
        let Source::File { path: first, .. } = first_path else {
            return None;
        };
        self.files.iter().rev().find(|a| {
            a.name == name && matches!(&a.source, Source::File { path, .. } if path == first)
        })
    }

    /// The parameter files considered, in precedence order.
    pub fn param_files(&self) -> &[ParamFile] {
        &self.param_files
    }
}

/// Encodes `oxmpirun --mca name value` pairs for [`CLI_ENV`]: one
/// `name=value` per line. Fails if a value contains a newline or a name is
/// empty or contains `=`, blanks or control characters.
///
/// ```
/// use oxmpi_runtime::mca::{decode_cli, encode_cli};
/// let pairs = [("btl", "^tcp"), ("x_y_z", "a b,c=d")];
/// let text = encode_cli(&pairs).unwrap();
/// assert_eq!(text, "btl=^tcp\nx_y_z=a b,c=d");
/// let back = decode_cli(&text).unwrap();
/// assert_eq!(back[1].value, "a b,c=d");
/// assert!(encode_cli(&[("btl", "a\nb")]).is_err());
/// ```
pub fn encode_cli<N: AsRef<str>, V: AsRef<str>>(pairs: &[(N, V)]) -> Result<String, McaError> {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        let (name, value) = (name.as_ref(), value.as_ref());
        check_cli_name(name)?;
        if value.contains(['\n', '\r']) {
            return Err(McaError::CommandLine {
                reason: format!(
                    "the value of --mca {name} contains a newline, which is not allowed"
                ),
            });
        }
        if value.contains('\0') {
            return Err(McaError::CommandLine {
                reason: format!("the value of --mca {name} contains a NUL byte"),
            });
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    Ok(out)
}

fn check_cli_name(name: &str) -> Result<(), McaError> {
    if name.is_empty() {
        return Err(McaError::CommandLine {
            reason: "empty parameter name".to_owned(),
        });
    }
    if name.contains(|c: char| c == '=' || c.is_whitespace() || c.is_control()) {
        return Err(McaError::CommandLine {
            reason: format!("invalid parameter name \"{}\"", name.escape_debug()),
        });
    }
    Ok(())
}

/// Decodes the text of [`CLI_ENV`] into command-line assignments (in the
/// order given). The empty text means no assignments; an empty line is
/// ignored; a line without `=` or with a bad name is an error.
pub fn decode_cli(text: &str) -> Result<Vec<Assignment>, McaError> {
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(McaError::CommandLine {
                reason: format!(
                    "entry {} (\"{}\") is not name=value",
                    i + 1,
                    line.escape_debug()
                ),
            });
        };
        check_cli_name(name)?;
        out.push(Assignment {
            name: name.to_owned(),
            value: value.to_owned(),
            source: Source::CommandLine,
        });
    }
    Ok(out)
}

/// Parses a parameter file's text: `name = value` lines, blank lines, and
/// comments. A comment starts with `#` at the start of a line or after a
/// blank (so `btl = self,sm  # fast` sets `self,sm`); a `#` inside a word is
/// kept. Name and value are trimmed; the value may be empty. A line without
/// `=`, or with an empty name or one containing blanks, is an error naming
/// the file and line.
///
/// ```
/// use oxmpi_runtime::mca::parse_param_file;
/// let a = parse_param_file("f.conf".as_ref(), "# c\n\nbtl = sm,self # why\n").unwrap();
/// assert_eq!((a[0].name.as_str(), a[0].value.as_str()), ("btl", "sm,self"));
/// let e = parse_param_file("f.conf".as_ref(), "btl\n").unwrap_err();
/// assert!(e.to_string().contains("line 1 in parameter file f.conf"));
/// ```
pub fn parse_param_file(path: &Path, text: &str) -> Result<Vec<Assignment>, McaError> {
    let mut out = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        let malformed = |reason: String| McaError::MalformedFile {
            path: path.to_owned(),
            line: idx + 1,
            reason,
        };
        let Some((name, value)) = line.split_once('=') else {
            return Err(malformed(format!(
                "expected \"name = value\", got \"{}\"",
                line.escape_debug()
            )));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(malformed("missing parameter name before \"=\"".to_owned()));
        }
        if name.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(malformed(format!(
                "invalid parameter name \"{}\"",
                name.escape_debug()
            )));
        }
        out.push(Assignment {
            name: name.to_owned(),
            value: value.trim().to_owned(),
            source: Source::File {
                path: path.to_owned(),
                line: idx + 1,
            },
        });
    }
    Ok(out)
}

/// Cuts `line` at the first `#` that starts the line or follows a blank.
fn strip_comment(line: &str) -> &str {
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_blank {
            return &line[..i];
        }
        prev_blank = c.is_whitespace();
    }
    line
}
