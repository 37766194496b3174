//! `oxmpi-info`: list oxmpi's frameworks, components and MCA parameters.
//!
//! A thin wrapper: all logic (and its documentation) is in
//! [`oxmpi_launch::info`].

use std::process::ExitCode;

use clap::Parser;
use oxmpi_launch::info::{self, InfoArgs};

fn main() -> ExitCode {
    oxmpi_runtime::log::init();
    info::main_entry(&InfoArgs::parse())
}
