//! `oxmpirun`: starts an MPI job. See `oxmpirun --help`.
fn main() -> std::process::ExitCode {
    oxmpi_launch::launcher_main()
}
