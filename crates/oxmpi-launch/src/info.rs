//! `oxmpi-info`: lists every framework, component and MCA parameter with its
//! current value, where that value came from, its level and its help.
//!
//! Contract: [`run`] resolves the given [`Registry`] against the given
//! [`Sources`] exactly as a rank would (so a bad value is the same error a
//! rank would report) and writes the listing to any `Write`. It reads no
//! environment itself; [`main_entry`] is the process wrapper that gathers
//! the real sources.
//!
//! What is shown (as `ompi_info` does):
//! * without `--param`: a header (package, version, parameter files), the
//!   components of every framework, then the parameters of every framework;
//! * `--param <framework> <component>`: only that component's parameters
//!   (`all` matches every framework / component; `base` selects the
//!   framework-wide ones, including the selection parameter);
//! * only parameters of level <= `--level` (default 1, or 9 with `--all`);
//! * `--parsable`: one `key:value` line per fact, e.g.
//!   `mca:btl:sm:param:btl_sm_eager_limit:value:4096`, with `value`,
//!   `source`, `level`, `type`, `enumerator:value` (enums, selections),
//!   `selected` (selections) and `help` lines per parameter.
//!
//! Parameters set in the environment or a file that nothing registers are
//! listed at the end (`unknown:param:<name>:...` in parsable form).

use std::collections::HashMap;
use std::io::{self, Write};
use std::process::ExitCode;

use oxmpi_runtime::mca::{self, McaError, Param, ParamType, Registry, Source, Sources, Value};

/// The package version shown in the header.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Width of the right-aligned label column of the human-readable output.
const LABEL: usize = 24;

/// Command-line arguments of `oxmpi-info`.
#[derive(Debug, Clone, Default, clap::Parser)]
#[command(
    name = "oxmpi-info",
    version,
    about = "List oxmpi's frameworks, components and MCA parameters",
    long_about = "List oxmpi's frameworks, components and MCA parameters with their current \
                  value, its source (default, parameter file, OXMPI_MCA_<name> environment \
                  variable, or --mca on the oxmpirun command line), level and help.\n\n\
                  Like ompi_info, only level-1 parameters are shown unless --level or --all \
                  says otherwise."
)]
pub struct InfoArgs {
    /// Show only the parameters of FRAMEWORK's COMPONENT. Either may be
    /// "all"; COMPONENT "base" means the framework-wide parameters
    #[arg(long, num_args = 2, value_names = ["FRAMEWORK", "COMPONENT"])]
    pub param: Option<Vec<String>>,

    /// Show parameters of level 1 up to LEVEL (1-3 user, 4-6 tuner,
    /// 7-9 developer). Default: 1, or 9 with --all
    #[arg(long, value_name = "LEVEL", value_parser = clap::value_parser!(u8).range(1..=9))]
    pub level: Option<u8>,

    /// Show everything: every framework, component and parameter at every
    /// level (same as --param all all --level 9)
    #[arg(short, long)]
    pub all: bool,

    /// Machine-readable output: one "mca:FW:COMP:param:NAME:KEY:VALUE" line per fact
    #[arg(long, alias = "parseable")]
    pub parsable: bool,
}

/// Why `oxmpi-info` failed.
#[derive(Debug, thiserror::Error)]
pub enum InfoError {
    /// A parameter source is invalid (the same error a rank would report).
    #[error(transparent)]
    Mca(#[from] McaError),
    /// `--param` named a framework nothing registers.
    #[error("unknown framework \"{framework}\" (known: {known})")]
    UnknownFramework {
        /// The name given.
        framework: String,
        /// The known frameworks, comma-separated.
        known: String,
    },
    /// `--param` named a component the framework does not have.
    #[error("framework {framework} has no component \"{component}\" (known: {known})")]
    UnknownComponent {
        /// The framework.
        framework: String,
        /// The name given.
        component: String,
        /// The known components, comma-separated.
        known: String,
    },
    /// `--param` did not get exactly two values.
    #[error("--param needs exactly two values: FRAMEWORK COMPONENT")]
    BadParamArgs,
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Io(#[from] io::Error),
}

/// The registry `oxmpi-info` lists: every parameter oxmpi registers.
pub fn default_registry() -> Result<Registry, McaError> {
    crate::params::all_params()
}

/// The whole `oxmpi-info` program after argument parsing: builds the
/// registry, gathers this process's sources, writes to standard output, and
/// turns errors into a message on standard error and exit status 1.
pub fn main_entry(args: &InfoArgs) -> ExitCode {
    let result = default_registry()
        .map_err(InfoError::from)
        .and_then(|mut reg| {
            let sources = Sources::from_process()?;
            let mut out = io::BufWriter::new(io::stdout().lock());
            run(&mut reg, &sources, args, &mut out)?;
            out.flush()?;
            Ok(())
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `oxmpi-info | head` is not a failure.
        Err(InfoError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxmpi-info: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves `registry` from `sources` and writes the listing `args` asks for.
///
/// ```
/// use oxmpi_launch::info::{self, InfoArgs};
/// use oxmpi_runtime::mca::Sources;
/// let mut reg = info::default_registry().unwrap();
/// let sources = Sources::new().with_env("btl", "^tcp");
/// let args = InfoArgs { param: Some(vec!["btl".into(), "all".into()]), parsable: true, ..Default::default() };
/// let mut out = Vec::new();
/// info::run(&mut reg, &sources, &args, &mut out).unwrap();
/// let out = String::from_utf8(out).unwrap();
/// assert!(out.contains("mca:btl:base:param:btl:value:^tcp\n"));
/// assert!(out.contains("mca:btl:base:param:btl:source:environment\n"));
/// ```
pub fn run(
    registry: &mut Registry,
    sources: &Sources,
    args: &InfoArgs,
    out: &mut impl Write,
) -> Result<(), InfoError> {
    registry.apply(sources)?;
    let (fw_filter, comp_filter) = match &args.param {
        None => ("all", "all"),
        Some(v) if v.len() == 2 => (v[0].as_str(), v[1].as_str()),
        Some(_) => return Err(InfoError::BadParamArgs),
    };
    check_filter(registry, fw_filter, comp_filter)?;
    let max_level = args.level.unwrap_or(if args.all { 9 } else { 1 });
    let header = args.param.is_none() || !args.parsable;

    if header {
        write_header(registry, sources, args.parsable, out)?;
    }
    if args.param.is_none() {
        write_components(registry, args.parsable, out)?;
    }
    for p in ordered_params(registry) {
        let fw_ok = fw_filter == "all" || p.framework() == fw_filter;
        let comp_ok = comp_filter == "all" || p.component() == comp_filter;
        if fw_ok && comp_ok && p.level() <= max_level {
            if args.parsable {
                write_param_parsable(p, out)?;
            } else {
                write_param_human(p, out)?;
            }
        }
    }
    if fw_filter == "all" {
        write_unknown(registry, args.parsable, out)?;
    }
    Ok(())
}

/// Every framework name: registered frameworks and frameworks of parameters.
fn framework_names(registry: &Registry) -> Vec<&str> {
    let mut names: Vec<&str> = registry.frameworks().iter().map(|f| f.name()).collect();
    for p in registry.params() {
        if !names.contains(&p.framework()) {
            names.push(p.framework());
        }
    }
    names
}

fn check_filter(registry: &Registry, fw: &str, comp: &str) -> Result<(), InfoError> {
    if fw == "all" {
        return Ok(());
    }
    let names = framework_names(registry);
    if !names.contains(&fw) {
        return Err(InfoError::UnknownFramework {
            framework: fw.to_owned(),
            known: names.join(", "),
        });
    }
    let mut comps: Vec<&str> = vec![mca::BASE];
    if let Some(f) = registry.framework(fw) {
        comps.extend(f.components().iter().map(String::as_str));
    }
    for p in registry.params().iter().filter(|p| p.framework() == fw) {
        if !comps.contains(&p.component()) {
            comps.push(p.component());
        }
    }
    if comp != "all" && !comps.contains(&comp) {
        return Err(InfoError::UnknownComponent {
            framework: fw.to_owned(),
            component: comp.to_owned(),
            known: comps.join(", "),
        });
    }
    Ok(())
}

/// Parameters grouped by framework (first-seen order), framework-wide ones
/// first, then by component (first-seen order), registration order within.
fn ordered_params(registry: &Registry) -> Vec<&Param> {
    let fws = framework_names(registry);
    let mut comp_rank: HashMap<(&str, &str), usize> = HashMap::new();
    for p in registry.params() {
        let next = comp_rank.len() + 1;
        let rank = if p.component() == mca::BASE { 0 } else { next };
        comp_rank
            .entry((p.framework(), p.component()))
            .or_insert(rank);
    }
    let mut params: Vec<&Param> = registry.params().iter().collect();
    params.sort_by_key(|p| {
        let fw = fws.iter().position(|f| *f == p.framework());
        (fw, comp_rank[&(p.framework(), p.component())])
    });
    params
}

fn write_header(
    registry: &Registry,
    sources: &Sources,
    parsable: bool,
    out: &mut impl Write,
) -> io::Result<()> {
    if parsable {
        writeln!(out, "package:oxmpi {VERSION}")?;
        writeln!(out, "oxmpi:version:full:{VERSION}")?;
        for f in sources.param_files() {
            let state = if f.found { "found" } else { "not found" };
            writeln!(
                out,
                "mca:param_file:{}:{state}",
                one_line(&f.path.to_string_lossy())
            )?;
        }
    } else {
        label(out, "Package", &format!("oxmpi {VERSION}"))?;
        label(out, "oxmpi", VERSION)?;
        let frameworks = framework_names(registry).join(", ");
        label(out, "Frameworks", &frameworks)?;
        for f in sources.param_files() {
            let state = if f.found { "" } else { " (not found)" };
            label(
                out,
                "Parameter file",
                &format!("{}{state}", f.path.display()),
            )?;
        }
    }
    Ok(())
}

fn write_components(registry: &Registry, parsable: bool, out: &mut impl Write) -> io::Result<()> {
    for f in registry.frameworks() {
        for c in f.components() {
            if parsable {
                writeln!(out, "mca:{}:{c}:version:component:{VERSION}", f.name())?;
            } else {
                label(
                    out,
                    &format!("MCA {}", f.name()),
                    &format!("{c} (v{VERSION})"),
                )?;
            }
        }
    }
    Ok(())
}

fn write_param_parsable(p: &Param, out: &mut impl Write) -> io::Result<()> {
    let prefix = format!("mca:{}:{}:param:{}", p.framework(), p.component(), p.name());
    writeln!(out, "{prefix}:value:{}", one_line(&p.value().to_string()))?;
    writeln!(out, "{prefix}:source:{}", parsable_source(p.source()))?;
    writeln!(out, "{prefix}:level:{}", p.level())?;
    writeln!(out, "{prefix}:type:{}", p.ty().name())?;
    if let ParamType::Enum(choices) | ParamType::Selection(choices) = p.ty() {
        for c in choices {
            writeln!(out, "{prefix}:enumerator:value:{c}")?;
        }
    }
    if let Value::Selection { selected, .. } = p.value() {
        writeln!(out, "{prefix}:selected:{}", selected.join(","))?;
    }
    writeln!(out, "{prefix}:help:{}", one_line(p.help()))
}

fn write_param_human(p: &Param, out: &mut impl Write) -> io::Result<()> {
    let what = format!(
        "parameter \"{}\" (current value: \"{}\", data source: {}, level: {} {}, type: {})",
        p.name(),
        p.value().to_string().escape_debug(),
        human_source(p.source(), p.name()),
        p.level(),
        level_name(p.level()),
        p.ty().name()
    );
    label(out, &format!("MCA {}", p.framework()), &what)?;
    let indent = " ".repeat(LABEL + 2);
    for line in p.help().lines() {
        writeln!(out, "{indent}{line}")?;
    }
    match (p.ty(), p.value()) {
        (ParamType::Enum(choices), _) => {
            writeln!(out, "{indent}Valid values: {}", choices.join(", "))?;
        }
        (ParamType::Selection(choices), Value::Selection { selected, .. }) => {
            writeln!(out, "{indent}Valid components: {}", choices.join(", "))?;
            writeln!(out, "{indent}Selected: {}", selected.join(", "))?;
        }
        _ => {}
    }
    Ok(())
}

fn write_unknown(registry: &Registry, parsable: bool, out: &mut impl Write) -> io::Result<()> {
    for a in registry.unknown() {
        if parsable {
            let prefix = format!("unknown:param:{}", one_line(&a.name));
            writeln!(out, "{prefix}:value:{}", one_line(&a.value))?;
            writeln!(out, "{prefix}:source:{}", parsable_source(&a.source))?;
        } else {
            let what = format!(
                "\"{}\" = \"{}\" (from {}; no component registers it, ignored)",
                a.name.escape_debug(),
                a.value.escape_debug(),
                a.source.describe(&a.name)
            );
            label(out, "Unknown parameter", &what)?;
        }
    }
    Ok(())
}

fn label(out: &mut impl Write, label: &str, text: &str) -> io::Result<()> {
    writeln!(out, "{label:>LABEL$}: {text}")
}

fn human_source(source: &Source, name: &str) -> String {
    match source {
        Source::Environment => format!("environment ({}{name})", mca::ENV_PREFIX),
        other => other.to_string(),
    }
}

/// `default`, `environment`, `command-line` or `file:<path>:<line>`.
fn parsable_source(source: &Source) -> String {
    match source {
        Source::Default => "default".to_owned(),
        Source::Environment => "environment".to_owned(),
        Source::CommandLine => "command-line".to_owned(),
        Source::File { path, line } => {
            format!("file:{}:{line}", one_line(&path.to_string_lossy()))
        }
    }
}

/// Keeps one fact per line in parsable output: control characters escaped.
fn one_line(s: &str) -> String {
    if s.contains(|c: char| c.is_control()) {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        s.to_owned()
    }
}

fn level_name(level: u8) -> &'static str {
    match level {
        1 => "user/basic",
        2 => "user/detail",
        3 => "user/all",
        4 => "tuner/basic",
        5 => "tuner/detail",
        6 => "tuner/all",
        7 => "dev/basic",
        8 => "dev/detail",
        _ => "dev/all",
    }
}
