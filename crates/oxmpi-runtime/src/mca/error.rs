//! The one error type of the parameter registry.
//!
//! Contract: every message names what went wrong *and where it came from*
//! (the parameter's full name and its source, or the file and line), so a
//! user who mistyped a value can fix it from the message alone.

use std::path::PathBuf;

/// Everything that can go wrong registering, reading or resolving parameters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McaError {
    /// Two registrations produced the same full name (a programming bug).
    #[error("parameter {name} is registered twice")]
    DuplicateName {
        /// The full parameter name.
        name: String,
    },

    /// A registration is malformed (bad name, level outside 1..=9, no help,
    /// a default an enum does not allow...). A programming bug.
    #[error("invalid registration of parameter {name}: {reason}")]
    InvalidSpec {
        /// The full parameter name (as far as it could be formed).
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A value given for a known parameter does not parse as its type.
    #[error("invalid value \"{value}\" for parameter {name} (from {source_desc}): {reason}")]
    InvalidValue {
        /// The full parameter name.
        name: String,
        /// The value exactly as given.
        value: String,
        /// Where the value came from, e.g. `environment variable OXMPI_MCA_btl`.
        source_desc: String,
        /// What was expected instead.
        reason: String,
    },

    /// A parameter name no component registers was given where that is
    /// fatal (the command line).
    #[error("unknown parameter {name} (from {source_desc}): no component registers it{hint}")]
    UnknownParameter {
        /// The name as given.
        name: String,
        /// Where it came from.
        source_desc: String,
        /// Empty, or a `; did you mean ...?` suggestion.
        hint: String,
    },

    /// A line of a parameter file is not `name = value`, a comment or blank.
    #[error("malformed line {line} in parameter file {}: {reason}", path.display())]
    MalformedFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },

    /// A parameter file exists (or was named explicitly) but cannot be read.
    #[error("cannot read parameter file {}: {error}", path.display())]
    FileRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },

    /// The command-line channel (`OXMPI_MCA_CLI`) cannot be encoded or decoded.
    #[error("bad --mca command-line parameters (OXMPI_MCA_CLI): {reason}")]
    CommandLine {
        /// What is wrong.
        reason: String,
    },

    /// An `OXMPI_MCA_*` environment variable's value is not UTF-8.
    #[error("environment variable {var} is not valid UTF-8")]
    NonUnicodeEnv {
        /// The variable's name.
        var: String,
    },

    /// A getter asked for a parameter that was never registered (a bug).
    #[error("parameter {name} is not registered")]
    NotRegistered {
        /// The name asked for.
        name: String,
    },

    /// A getter of one type was used on a parameter of another (a bug).
    #[error("parameter {name} has type {actual}, not {requested}")]
    WrongType {
        /// The parameter.
        name: String,
        /// The type of the getter used.
        requested: &'static str,
        /// The registered type.
        actual: &'static str,
    },
}
