//! Parameter types, typed values, and the text parsers for each type.
//!
//! Contract: each `parse_*` function accepts exactly the syntax documented on
//! it and otherwise returns `Err(reason)`, where `reason` says what was
//! expected (the caller adds the parameter name and the source). Nothing is
//! ever silently replaced by a default.

use std::fmt;

/// The type of a parameter, with the extra data some types need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamType {
    /// `1/0`, `true/false`, `yes/no`, `on/off` (case-insensitive).
    Bool,
    /// A signed 64-bit integer, decimal or `0x` hexadecimal.
    Int,
    /// A byte count with optional binary suffix: `4096`, `64K`, `1M`, `2G`.
    Size,
    /// Any text.
    String,
    /// Comma-separated strings.
    List,
    /// One of a fixed set of names.
    Enum(Vec<String>),
    /// A framework's component selection list (`self,sm` or `^tcp`) over the
    /// given components, in registration order.
    Selection(Vec<String>),
}

impl ParamType {
    /// A short type name, as shown by `oxmpi-info`.
    ///
    /// ```
    /// use oxmpi_runtime::mca::ParamType;
    /// assert_eq!(ParamType::Size.name(), "size");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            ParamType::Bool => "bool",
            ParamType::Int => "int",
            ParamType::Size => "size",
            ParamType::String => "string",
            ParamType::List => "list",
            ParamType::Enum(_) => "enum",
            ParamType::Selection(_) => "selection",
        }
    }

    /// Parses `text` as a value of this type; `Err` holds what was expected.
    ///
    /// ```
    /// use oxmpi_runtime::mca::{ParamType, Value};
    /// assert_eq!(ParamType::Size.parse("64K"), Ok(Value::Size(65536)));
    /// assert!(ParamType::Bool.parse("maybe").is_err());
    /// ```
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        Ok(match self {
            ParamType::Bool => Value::Bool(parse_bool(text)?),
            ParamType::Int => Value::Int(parse_int(text)?),
            ParamType::Size => Value::Size(parse_size(text)?),
            ParamType::String => Value::String(text.to_owned()),
            ParamType::List => Value::List(parse_list(text)?),
            ParamType::Enum(choices) => Value::Enum(parse_enum(text, choices)?.to_owned()),
            ParamType::Selection(components) => {
                let selected = parse_selection(text, components)?;
                Value::Selection {
                    expr: text.trim().to_owned(),
                    selected,
                }
            }
        })
    }
}

/// A typed parameter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A size in bytes.
    Size(u64),
    /// A string.
    String(String),
    /// A list of strings.
    List(Vec<String>),
    /// The chosen enum name.
    Enum(String),
    /// A resolved component selection.
    Selection {
        /// The selection expression as given (empty = all components).
        expr: String,
        /// The selected components, in selection order.
        selected: Vec<String>,
    },
}

impl fmt::Display for Value {
    /// The canonical text form: parsing it again gives the same value
    /// (sizes are shown in bytes, lists comma-joined, selections as given).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => f.write_str(if *b { "true" } else { "false" }),
            Value::Int(i) => write!(f, "{i}"),
            Value::Size(s) => write!(f, "{s}"),
            Value::String(s) | Value::Enum(s) => f.write_str(s),
            Value::List(l) => f.write_str(&l.join(",")),
            Value::Selection { expr, .. } => f.write_str(expr),
        }
    }
}

const BOOL_EXPECTED: &str = "expected a boolean: 1/0, true/false, yes/no or on/off";
const INT_EXPECTED: &str = "expected an integer like 42, -1 or 0x1f";
const SIZE_EXPECTED: &str = "expected a size like 4096, 64K, 1M";

/// Parses a boolean: `1/0`, `true/false`, `yes/no`, `on/off`, any case,
/// surrounding blanks ignored.
///
/// ```
/// use oxmpi_runtime::mca::parse_bool;
/// assert_eq!(parse_bool("Yes"), Ok(true));
/// assert_eq!(parse_bool("off"), Ok(false));
/// assert!(parse_bool("2").is_err());
/// ```
pub fn parse_bool(text: &str) -> Result<bool, String> {
    let t = text.trim();
    const TRUE: [&str; 4] = ["1", "true", "yes", "on"];
    const FALSE: [&str; 4] = ["0", "false", "no", "off"];
    if TRUE.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        Ok(true)
    } else if FALSE.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        Ok(false)
    } else {
        Err(BOOL_EXPECTED.to_owned())
    }
}

/// Parses an `i64`: optional sign, then decimal digits or `0x`/`0X` and hex
/// digits. Surrounding blanks are ignored; overflow is an error.
///
/// ```
/// use oxmpi_runtime::mca::parse_int;
/// assert_eq!(parse_int("-17"), Ok(-17));
/// assert_eq!(parse_int("0x1F"), Ok(31));
/// assert!(parse_int("12abc").is_err());
/// ```
pub fn parse_int(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let (negative, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = match body.get(..2) {
        Some("0x") | Some("0X") => (16, &body[2..]),
        _ => (10, body),
    };
    // from_str_radix would accept a second sign ("--5", "0x-5"): refuse it.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(INT_EXPECTED.to_owned());
    }
    // Parse the magnitude as u64 so that i64::MIN is representable.
    let magnitude = u64::from_str_radix(digits, radix).map_err(|_| {
        if digits.bytes().all(|b| (b as char).is_digit(radix)) {
            format!("{INT_EXPECTED} (out of range for a 64-bit integer)")
        } else {
            INT_EXPECTED.to_owned()
        }
    })?;
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    value.ok_or_else(|| format!("{INT_EXPECTED} (out of range for a 64-bit integer)"))
}

/// Parses a byte count: decimal digits, then optionally `K`, `M` or `G`
/// (binary multiples: 1024, 1024², 1024³; any case), optionally followed by
/// `B` or `iB`; a bare `B` is allowed too. Surrounding blanks and blanks
/// between number and suffix are ignored. Negative numbers, fractions and
/// overflow are errors.
///
/// ```
/// use oxmpi_runtime::mca::parse_size;
/// assert_eq!(parse_size("4096"), Ok(4096));
/// assert_eq!(parse_size("64k"), Ok(64 << 10));
/// assert_eq!(parse_size("1MiB"), Ok(1 << 20));
/// assert_eq!(parse_size("2G"), Ok(2 << 30));
/// assert!(parse_size("-1").is_err());
/// assert!(parse_size("12Q").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    if digits.is_empty() {
        return Err(SIZE_EXPECTED.to_owned());
    }
    let suffix = suffix.trim_start().to_ascii_lowercase();
    let shift = match suffix.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(SIZE_EXPECTED.to_owned()),
    };
    let overflow = || format!("{SIZE_EXPECTED} (too large for 64 bits)");
    let number: u64 = digits.parse().map_err(|_| overflow())?;
    number.checked_mul(1u64 << shift).ok_or_else(overflow)
}

/// Parses a comma-separated list. Entries are trimmed; an empty (or blank)
/// text is the empty list; an empty entry (`a,,b`, a trailing comma) is an
/// error because it is almost always a typo.
///
/// ```
/// use oxmpi_runtime::mca::parse_list;
/// assert_eq!(parse_list("eth0, ib0"), Ok(vec!["eth0".to_owned(), "ib0".to_owned()]));
/// assert_eq!(parse_list(""), Ok(vec![]));
/// assert!(parse_list("a,,b").is_err());
/// ```
pub fn parse_list(text: &str) -> Result<Vec<String>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                Err("empty entry in comma-separated list".to_owned())
            } else {
                Ok(entry.to_owned())
            }
        })
        .collect()
}

/// Parses one of `choices` (exact, case-sensitive match after trimming) and
/// returns the matching choice.
///
/// ```
/// use oxmpi_runtime::mca::parse_enum;
/// let choices = ["auto".to_owned(), "yes".to_owned(), "no".to_owned()];
/// assert_eq!(parse_enum("yes", &choices), Ok("yes"));
/// assert_eq!(parse_enum("maybe", &choices).unwrap_err(), "expected one of: auto, yes, no");
/// ```
pub fn parse_enum<'c>(text: &str, choices: &'c [String]) -> Result<&'c str, String> {
    let t = text.trim();
    choices
        .iter()
        .find(|c| c.as_str() == t)
        .map(String::as_str)
        .ok_or_else(|| format!("expected one of: {}", choices.join(", ")))
}

/// Resolves a component selection expression against a framework's
/// `components` (in registration order) and returns the selected components
/// in order.
///
/// * empty or blank: every component, in registration order;
/// * `a,b,c` (include list): exactly those, in the order given;
/// * `^a,b` (exclude list; `^` applies to the whole list, `^a,^b` is also
///   accepted): every component except those, in registration order.
///
/// Errors: an unknown component, mixing include and exclude (`a,^b`), an
/// empty entry, a component listed twice.
///
/// ```
/// use oxmpi_runtime::mca::parse_selection;
/// let btl: Vec<String> = ["self", "sm", "tcp"].map(String::from).to_vec();
/// assert_eq!(parse_selection("tcp,self", &btl).unwrap(), ["tcp", "self"]);
/// assert_eq!(parse_selection("^tcp", &btl).unwrap(), ["self", "sm"]);
/// assert_eq!(parse_selection("", &btl).unwrap(), ["self", "sm", "tcp"]);
/// assert!(parse_selection("self,^tcp", &btl).is_err());
/// ```
pub fn parse_selection(text: &str, components: &[String]) -> Result<Vec<String>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(components.to_vec());
    }
    let (exclude, body) = match t.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let mut named: Vec<&str> = Vec::new();
    for raw in body.split(',') {
        let mut entry = raw.trim();
        if let Some(rest) = entry.strip_prefix('^') {
            if !exclude {
                return Err(format!(
                    "cannot mix included components and excluded (^{}) ones; \
                     use either \"a,b\" or \"^a,b\"",
                    rest.trim()
                ));
            }
            entry = rest.trim();
        }
        if entry.is_empty() {
            return Err("empty entry in component list".to_owned());
        }
        if !components.iter().any(|c| c == entry) {
            return Err(format!(
                "unknown component \"{entry}\" (known components: {})",
                components.join(", ")
            ));
        }
        if named.contains(&entry) {
            return Err(format!("component \"{entry}\" is listed twice"));
        }
        named.push(entry);
    }
    Ok(if exclude {
        components
            .iter()
            .filter(|c| !named.contains(&c.as_str()))
            .cloned()
            .collect()
    } else {
        named.into_iter().map(str::to_owned).collect()
    })
}
