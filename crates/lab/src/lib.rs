//! roamkv-lab: the I/O lab, one module or folder per command. A tracefs block tracer that names
//! every request (`trace`, and `lab trace`), the file workloads of papers 001 and 004 (`fs`), and
//! the `roamkv lab` command line (`cli`);
//! SQLite transactions (`sqlite`) and SQLite queries compared with roamkv (`queries`); paper
//! 003's commit experiment (`commit`); syscall traces recorded and replayed (`replay`); paper
//! 004's I/O stack table (`stack`); the qemu guest route (`vm`). The rig under all of them (file
//! systems on loop devices, device counters, the report kit, the skip-or-fail rule) is
//! `roamkv_testbed`.
pub mod cli;
pub mod commit;
pub mod fs;
pub mod queries;
pub mod replay;
pub mod sqlite;
pub mod stack;
pub mod trace;
pub mod vm;

/// The lab's errors are the rig's: one enum for every expected failure of both.
pub use roamkv_testbed::Error as LabError;
