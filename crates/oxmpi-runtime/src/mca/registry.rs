//! The registry: registered parameters, frameworks, and their resolved values.
//!
//! Contract: a [`Registry`] is a plain value (no global state). Components
//! register parameters ([`Registry::register`]) and frameworks
//! ([`Registry::register_framework`]); [`Registry::apply`] then resolves
//! every parameter from a [`Sources`] at once, recording each value's
//! [`Source`], or fails without changing anything. Before `apply` every
//! parameter holds its default. Getters are typed and never allocate on
//! success.

use std::collections::HashMap;

use super::source::{Assignment, Source, Sources};
use super::value::{ParamType, Value};
use super::McaError;

/// Lowest and highest information level (as in Open MPI: 1-3 end user,
/// 4-6 application tuner, 7-9 developer).
pub const LEVELS: std::ops::RangeInclusive<u8> = 1..=9;

/// The component name used for framework-wide parameters.
pub const BASE: &str = "base";

/// What a component registers: where the parameter lives, its type and
/// default, its level and help.
///
/// The full name is `<framework>_<param>` for component [`BASE`] and
/// `<framework>_<component>_<param>` otherwise.
///
/// ```
/// use oxmpi_runtime::mca::ParamSpec;
/// let spec = ParamSpec::size("btl", "sm", "eager_limit", 4096)
///     .level(4)
///     .help("Messages up to this size are sent eagerly");
/// assert_eq!(spec.full_name(), "btl_sm_eager_limit");
/// assert_eq!(ParamSpec::bool("mpi", "base", "leave_pinned", true).full_name(), "mpi_leave_pinned");
/// ```
#[derive(Debug, Clone)]
pub struct ParamSpec {
    framework: String,
    component: String,
    param: String,
    ty: ParamType,
    default: Value,
    level: u8,
    help: String,
}

impl ParamSpec {
    fn new(framework: &str, component: &str, param: &str, ty: ParamType, default: Value) -> Self {
        ParamSpec {
            framework: framework.to_owned(),
            component: component.to_owned(),
            param: param.to_owned(),
            ty,
            default,
            // 0 = not set: `register` insists on a real level.
            level: 0,
            help: String::new(),
        }
    }

    /// A boolean parameter.
    pub fn bool(framework: &str, component: &str, param: &str, default: bool) -> Self {
        Self::new(
            framework,
            component,
            param,
            ParamType::Bool,
            Value::Bool(default),
        )
    }

    /// An integer parameter.
    pub fn int(framework: &str, component: &str, param: &str, default: i64) -> Self {
        Self::new(
            framework,
            component,
            param,
            ParamType::Int,
            Value::Int(default),
        )
    }

    /// A size (bytes) parameter.
    pub fn size(framework: &str, component: &str, param: &str, default: u64) -> Self {
        Self::new(
            framework,
            component,
            param,
            ParamType::Size,
            Value::Size(default),
        )
    }

    /// A string parameter.
    pub fn string(framework: &str, component: &str, param: &str, default: &str) -> Self {
        let d = Value::String(default.to_owned());
        Self::new(framework, component, param, ParamType::String, d)
    }

    /// A comma-separated list parameter.
    pub fn list(framework: &str, component: &str, param: &str, default: &[&str]) -> Self {
        let d = Value::List(default.iter().map(|s| (*s).to_owned()).collect());
        Self::new(framework, component, param, ParamType::List, d)
    }

    /// An enum parameter: one of `choices`; `default` must be one of them
    /// (checked by [`Registry::register`]).
    pub fn enumeration(
        framework: &str,
        component: &str,
        param: &str,
        choices: &[&str],
        default: &str,
    ) -> Self {
        let ty = ParamType::Enum(choices.iter().map(|s| (*s).to_owned()).collect());
        Self::new(
            framework,
            component,
            param,
            ty,
            Value::Enum(default.to_owned()),
        )
    }

    /// Sets the information level, 1..=9 (required).
    pub fn level(mut self, level: u8) -> Self {
        self.level = level;
        self
    }

    /// Sets the help text (required, non-empty).
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = help.into();
        self
    }

    /// The full parameter name.
    pub fn full_name(&self) -> String {
        full_name(&self.framework, &self.component, &self.param)
    }
}

fn full_name(framework: &str, component: &str, param: &str) -> String {
    if component == BASE {
        format!("{framework}_{param}")
    } else {
        format!("{framework}_{component}_{param}")
    }
}

/// A registered parameter with its current value.
#[derive(Debug, Clone)]
pub struct Param {
    name: String,
    framework: String,
    component: String,
    ty: ParamType,
    default: Value,
    level: u8,
    help: String,
    value: Value,
    source: Source,
}

impl Param {
    /// The full name, e.g. `btl_sm_eager_limit` (or `btl` for a selection).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The framework, e.g. `btl`.
    pub fn framework(&self) -> &str {
        &self.framework
    }
    /// The component, or [`BASE`] for framework-wide parameters.
    pub fn component(&self) -> &str {
        &self.component
    }
    /// The type.
    pub fn ty(&self) -> &ParamType {
        &self.ty
    }
    /// The registered default.
    pub fn default_value(&self) -> &Value {
        &self.default
    }
    /// The information level, 1..=9.
    pub fn level(&self) -> u8 {
        self.level
    }
    /// The help text.
    pub fn help(&self) -> &str {
        &self.help
    }
    /// The current value (the default until [`Registry::apply`]).
    pub fn value(&self) -> &Value {
        &self.value
    }
    /// Where the current value came from.
    pub fn source(&self) -> &Source {
        &self.source
    }
}

/// A framework and its components, in registration order.
#[derive(Debug, Clone)]
pub struct Framework {
    name: String,
    components: Vec<String>,
    help: String,
}

impl Framework {
    /// The framework's name, e.g. `btl`.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its components in registration order.
    pub fn components(&self) -> &[String] {
        &self.components
    }
    /// The help text of its selection parameter.
    pub fn help(&self) -> &str {
        &self.help
    }
}

/// Every registered parameter and framework, and the resolved values.
///
/// ```
/// use oxmpi_runtime::mca::{ParamSpec, Registry, Source, Sources};
/// let mut reg = Registry::new();
/// reg.register_framework("btl", &["self", "sm", "tcp"], "Byte transfer layers").unwrap();
/// reg.register(ParamSpec::size("btl", "sm", "eager_limit", 4096).level(4).help("Eager limit"))
///     .unwrap();
///
/// let sources = Sources::new()
///     .with_env("btl_sm_eager_limit", "64K")
///     .with_cli("btl", "^tcp");
/// reg.apply(&sources).unwrap();
///
/// assert_eq!(reg.get_size("btl_sm_eager_limit").unwrap(), 65536);
/// assert_eq!(reg.selection("btl").unwrap(), ["self", "sm"]);
/// assert_eq!(reg.param("btl").unwrap().source(), &Source::CommandLine);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Registry {
    params: Vec<Param>,
    index: HashMap<String, usize>,
    frameworks: Vec<Framework>,
    unknown: Vec<Assignment>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a parameter. Errors (programming bugs, reported rather than
    /// panicking): a name registered twice, a framework/component/param name
    /// that is not lowercase `[a-z0-9]` (plus `_` inside the param part), a
    /// level outside 1..=9, an empty help text, an enum default that is not
    /// one of its choices.
    ///
    /// ```
    /// use oxmpi_runtime::mca::{ParamSpec, Registry};
    /// let mut reg = Registry::new();
    /// let spec = ParamSpec::bool("mpi", "base", "leave_pinned", true).level(3).help("h");
    /// reg.register(spec.clone()).unwrap();
    /// assert!(reg.register(spec).is_err());
    /// ```
    pub fn register(&mut self, spec: ParamSpec) -> Result<(), McaError> {
        let name = spec.full_name();
        let invalid = |reason: String| McaError::InvalidSpec {
            name: name.clone(),
            reason,
        };
        check_word("framework", &spec.framework, false).map_err(invalid)?;
        check_word("component", &spec.component, false).map_err(invalid)?;
        check_word("parameter", &spec.param, true).map_err(invalid)?;
        if !LEVELS.contains(&spec.level) {
            return Err(invalid(format!(
                "level {} is outside 1..=9 (set it with .level())",
                spec.level
            )));
        }
        if spec.help.trim().is_empty() {
            return Err(invalid(
                "help text is empty (set it with .help())".to_owned(),
            ));
        }
        if let (ParamType::Enum(choices), Value::Enum(d)) = (&spec.ty, &spec.default) {
            if choices.is_empty() {
                return Err(invalid("an enum needs at least one choice".to_owned()));
            }
            if !choices.contains(d) {
                return Err(invalid(format!(
                    "default \"{d}\" is not one of: {}",
                    choices.join(", ")
                )));
            }
        }
        self.insert(Param {
            name,
            framework: spec.framework,
            component: spec.component,
            ty: spec.ty,
            value: spec.default.clone(),
            default: spec.default,
            level: spec.level,
            help: spec.help,
            source: Source::Default,
        })
    }

    fn insert(&mut self, param: Param) -> Result<(), McaError> {
        if self.index.contains_key(&param.name) {
            return Err(McaError::DuplicateName { name: param.name });
        }
        self.index.insert(param.name.clone(), self.params.len());
        self.params.push(param);
        Ok(())
    }

    /// Registers a framework with its components (in the default selection
    /// order), and with it the selection parameter named just `framework`
    /// (level 1, component [`BASE`]). An empty selection means all
    /// components; see [`parse_selection`](super::parse_selection) for the
    /// syntax.
    pub fn register_framework(
        &mut self,
        framework: &str,
        components: &[&str],
        help: &str,
    ) -> Result<(), McaError> {
        let invalid = |reason: String| McaError::InvalidSpec {
            name: framework.to_owned(),
            reason,
        };
        check_word("framework", framework, false).map_err(invalid)?;
        for c in components {
            check_word("component", c, false).map_err(invalid)?;
            if *c == BASE {
                return Err(invalid(format!("\"{BASE}\" is reserved, not a component")));
            }
        }
        if help.trim().is_empty() {
            return Err(invalid("help text is empty".to_owned()));
        }
        let comps: Vec<String> = components.iter().map(|c| (*c).to_owned()).collect();
        for (i, c) in comps.iter().enumerate() {
            if comps[..i].contains(c) {
                return Err(invalid(format!("component \"{c}\" is listed twice")));
            }
        }
        if self.framework(framework).is_some() {
            return Err(McaError::DuplicateName {
                name: framework.to_owned(),
            });
        }
        let default = Value::Selection {
            expr: String::new(),
            selected: comps.clone(),
        };
        self.insert(Param {
            name: framework.to_owned(),
            framework: framework.to_owned(),
            component: BASE.to_owned(),
            ty: ParamType::Selection(comps.clone()),
            value: default.clone(),
            default,
            level: 1,
            help: help.to_owned(),
            source: Source::Default,
        })?;
        self.frameworks.push(Framework {
            name: framework.to_owned(),
            components: comps,
            help: help.to_owned(),
        });
        Ok(())
    }

    /// Adds a component to an already registered framework (for crates that
    /// provide a component of another crate's framework). Call it before
    /// [`Registry::apply`]: it resets the selection to its default.
    pub fn add_component(&mut self, framework: &str, component: &str) -> Result<(), McaError> {
        let invalid = |reason: String| McaError::InvalidSpec {
            name: framework.to_owned(),
            reason,
        };
        check_word("component", component, false).map_err(invalid)?;
        if component == BASE {
            return Err(invalid(format!("\"{BASE}\" is reserved, not a component")));
        }
        let Some(fw) = self.frameworks.iter_mut().find(|f| f.name == framework) else {
            return Err(McaError::NotRegistered {
                name: framework.to_owned(),
            });
        };
        if fw.components.iter().any(|c| c == component) {
            return Err(McaError::DuplicateName {
                name: format!("{framework} component {component}"),
            });
        }
        fw.components.push(component.to_owned());
        let comps = fw.components.clone();
        let p = &mut self.params[self.index[framework]];
        p.default = Value::Selection {
            expr: String::new(),
            selected: comps.clone(),
        };
        p.value = p.default.clone();
        p.source = Source::Default;
        p.ty = ParamType::Selection(comps);
        Ok(())
    }

    /// Resolves every parameter from `sources` (command line > environment >
    /// files > default) and records where each value came from.
    ///
    /// Errors, checked before anything changes (on error the registry is
    /// unchanged): a command-line name no one registered; a value that does
    /// not parse as its parameter's type (only the winning value of each
    /// parameter is checked: an overridden one never takes effect). Unknown
    /// names from the environment or a file are only warned about (they may
    /// belong to components not built in) and kept in [`Registry::unknown`].
    pub fn apply(&mut self, sources: &Sources) -> Result<(), McaError> {
        for a in sources.assignments() {
            if a.source == Source::CommandLine && !self.index.contains_key(&a.name) {
                return Err(McaError::UnknownParameter {
                    hint: self.suggest(&a.name),
                    source_desc: a.source.describe(&a.name),
                    name: a.name.clone(),
                });
            }
        }
        let mut resolved = Vec::with_capacity(self.params.len());
        for p in &self.params {
            resolved.push(match sources.lookup(&p.name) {
                None => (p.default.clone(), Source::Default),
                Some(a) => {
                    let value =
                        p.ty.parse(&a.value)
                            .map_err(|reason| McaError::InvalidValue {
                                name: p.name.clone(),
                                value: a.value.clone(),
                                source_desc: a.source.describe(&p.name),
                                reason,
                            })?;
                    (value, a.source.clone())
                }
            });
        }
        for (p, (value, source)) in self.params.iter_mut().zip(resolved) {
            p.value = value;
            p.source = source;
        }
        self.unknown.clear();
        for a in sources.assignments() {
            let seen = self.unknown.iter().any(|u| u.name == a.name);
            if !self.index.contains_key(&a.name) && !seen {
                tracing::warn!(
                    "ignoring unknown MCA parameter {} (from {}){}",
                    a.name,
                    a.source.describe(&a.name),
                    self.suggest(&a.name)
                );
                self.unknown.push(a.clone());
            }
        }
        Ok(())
    }

    /// `; did you mean X?` for the closest registered name, or empty.
    fn suggest(&self, name: &str) -> String {
        let lower = name.to_ascii_lowercase();
        if lower != name && self.index.contains_key(&lower) {
            return format!("; parameter names are lowercase: did you mean {lower}?");
        }
        self.params
            .iter()
            .map(|p| (edit_distance(&lower, &p.name), &p.name))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map(|(_, n)| format!("; did you mean {n}?"))
            .unwrap_or_default()
    }

    /// Every parameter, in registration order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The parameter with this full name.
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.index.get(name).map(|&i| &self.params[i])
    }

    /// Every framework, in registration order.
    pub fn frameworks(&self) -> &[Framework] {
        &self.frameworks
    }

    /// The framework with this name.
    pub fn framework(&self, name: &str) -> Option<&Framework> {
        self.frameworks.iter().find(|f| f.name == name)
    }

    /// Assignments from the environment or files whose name no one
    /// registered (first occurrence of each name), as of the last `apply`.
    pub fn unknown(&self) -> &[Assignment] {
        &self.unknown
    }

    fn get(&self, name: &str) -> Result<&Param, McaError> {
        self.param(name).ok_or_else(|| McaError::NotRegistered {
            name: name.to_owned(),
        })
    }

    /// The current value of a bool parameter.
    pub fn get_bool(&self, name: &str) -> Result<bool, McaError> {
        let p = self.get(name)?;
        match p.value {
            Value::Bool(b) => Ok(b),
            _ => Err(wrong_type(p, "bool")),
        }
    }

    /// The current value of an integer parameter.
    pub fn get_int(&self, name: &str) -> Result<i64, McaError> {
        let p = self.get(name)?;
        match p.value {
            Value::Int(i) => Ok(i),
            _ => Err(wrong_type(p, "int")),
        }
    }

    /// The current value of a size parameter, in bytes.
    pub fn get_size(&self, name: &str) -> Result<u64, McaError> {
        let p = self.get(name)?;
        match p.value {
            Value::Size(s) => Ok(s),
            _ => Err(wrong_type(p, "size")),
        }
    }

    /// The current value of a string parameter.
    pub fn get_string(&self, name: &str) -> Result<&str, McaError> {
        let p = self.get(name)?;
        match &p.value {
            Value::String(s) => Ok(s),
            _ => Err(wrong_type(p, "string")),
        }
    }

    /// The current value of a list parameter.
    pub fn get_list(&self, name: &str) -> Result<&[String], McaError> {
        let p = self.get(name)?;
        match &p.value {
            Value::List(l) => Ok(l),
            _ => Err(wrong_type(p, "list")),
        }
    }

    /// The current choice of an enum parameter.
    pub fn get_enum(&self, name: &str) -> Result<&str, McaError> {
        let p = self.get(name)?;
        match &p.value {
            Value::Enum(s) => Ok(s),
            _ => Err(wrong_type(p, "enum")),
        }
    }

    /// The selected components of `framework`, in selection order.
    pub fn selection(&self, framework: &str) -> Result<&[String], McaError> {
        let p = self.get(framework)?;
        match &p.value {
            Value::Selection { selected, .. } => Ok(selected),
            _ => Err(wrong_type(p, "selection")),
        }
    }
}

fn wrong_type(p: &Param, requested: &'static str) -> McaError {
    McaError::WrongType {
        name: p.name.clone(),
        requested,
        actual: p.ty.name(),
    }
}

/// `[a-z0-9]+`, plus inner `_` when `underscores`; never `all` (an
/// `oxmpi-info` keyword).
fn check_word(what: &str, word: &str, underscores: bool) -> Result<(), String> {
    let ok_char =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || (underscores && c == '_');
    if word.is_empty() || !word.chars().all(ok_char) || word.starts_with('_') || word.ends_with('_')
    {
        let allowed = if underscores {
            "lowercase letters, digits and inner underscores"
        } else {
            "lowercase letters and digits"
        };
        return Err(format!("{what} name \"{word}\" must be {allowed}"));
    }
    if word == "all" && !underscores {
        return Err(format!("{what} name \"all\" is reserved"));
    }
    Ok(())
}

/// Levenshtein distance (names are short, so the quadratic cost is nothing).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
