//! The router's process: drain, upgrade by handover, worker threads.

mod drain;
mod upgrade;
mod workers;
