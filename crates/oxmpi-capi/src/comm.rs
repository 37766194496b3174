//! Communicator and group calls.
