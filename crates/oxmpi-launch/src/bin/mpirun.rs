//! `mpirun`: the same program as `oxmpirun`, under the name MPI users type.
fn main() -> std::process::ExitCode {
    oxmpi_launch::launcher_main()
}
