//! The fault soaks: `roamkv bench crash` (kill -9 of a real `roamkv load --ack`) and `roamkv
//! bench powercut` (power cuts of a qemu guest), the record stream and ledger they share
//! (`survival`), and their verdict (`report`).
pub mod crash;
pub mod powercut;
pub mod report;
pub mod survival;
